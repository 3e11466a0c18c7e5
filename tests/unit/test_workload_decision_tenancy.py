"""Pools belong to a namespace: the Workload decision for a Job of another namespace, the
installer's sharing, warm nodes, and pools made before pools had an owner."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.settings import Settings
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import PoolChange, WorkloadInputs, decide
from tests.support.backends import UNREACHED_BACKEND
from tests.support.jobs import job as job_body
from tests.support.pools import NODE_ROLE, claim, pool_spec
from tests.support.pools import pool as pool_body
from tests.support.workloads import check, condition
from tests.support.workloads import workload as wl_body

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CHECK = "atomic-gang-check"
LABELS = {c.POOL_LABEL: "pool-a", c.QUEUE_NAME_LABEL: "q"}
ANNOTATIONS = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


def settings(shared: list[dict[str, Any]] | None = None) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "prod",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
            # Left out unless set: the default is what most tests show.
            **({"tenancy": {"sharedPools": shared}} if shared else {}),
        }
    )


def workload(namespace: str, uid: str = "uid-b") -> Workload:
    return Workload.model_validate(
        wl_body(
            namespace=namespace,
            uid=uid,
            resource_version="7",
            owner=job_body(namespace=namespace),
            conditions=[condition(c.WL_QUOTA_RESERVED, "True", reason="R")],
            checks=[check(CHECK, c.CheckState.PENDING)],
        )
    )


def pool(
    owner: str | None,
    *,
    phase: str = Phase.IDLE,
    instances: int = 0,
    holder: tuple[str, str] | None = None,
    keep_warm_until: str | None = None,
) -> GangNodePool:
    held = claim(namespace=holder[0], name=f"wl-{holder[1]}", uid=holder[1]) if holder else None
    status: dict[str, Any] = {
        "phase": phase,
        "instanceIds": [f"i-{n:017x}" for n in range(instances)],
        "readyNodes": instances,
    }
    if instances:
        status["activeGroup"] = "gen-0"
    if keep_warm_until:
        status["keepWarmUntil"] = keep_warm_until
    spec = pool_spec(claim=held, owner_namespace=owner)
    return GangNodePool.model_validate(pool_body(uid="pool-uid", spec=spec, status=status))


def inputs(
    wl: Workload, gnp: GangNodePool | None, config: Settings, claimant_exists: bool = True
) -> WorkloadInputs:
    return WorkloadInputs(
        workload=wl,
        check_name=CHECK,
        owner_labels=LABELS,
        owner_annotations=ANNOTATIONS,
        pool=gnp,
        claimant_exists=claimant_exists,
        settings=config,
        now=NOW,
    )


def test_a_new_pool_belongs_to_the_namespace_of_the_workload_that_creates_it() -> None:
    decision = decide(inputs(workload("team-a"), None, settings()))
    assert decision.pool_change is PoolChange.CREATE
    assert decision.owner_namespace == "team-a"


@pytest.mark.parametrize(
    ("phase", "instances"),
    [(Phase.IDLE, 0), (Phase.KEEP_WARM, 4)],
    ids=["idle", "warm"],
)
def test_a_pool_of_another_namespace_is_rejected_naming_pool_namespace_and_fix(
    phase: str, instances: int
) -> None:
    decision = decide(
        inputs(workload("team-b"), pool("team-a", phase=phase, instances=instances), settings())
    )
    assert decision.pool_change is PoolChange.NONE  # no claim: nothing launched, no warm set
    assert decision.claim is None and not decision.reuses_warm_set
    assert decision.check is not None
    assert decision.check.state == c.CheckState.REJECTED
    assert decision.check.reason == c.REASON_POOL_OF_ANOTHER_NAMESPACE
    message = decision.check.message
    assert "pool pool-a belongs to namespace team-a" in message
    assert "a Job in namespace team-b may not claim it or its warm nodes" in message
    assert "a pool name of your own" in message and "tenancy.sharedPools" in message


def test_a_pool_of_another_namespace_is_rejected_even_while_its_owner_holds_it() -> None:
    held = pool("team-a", phase=Phase.SATISFIED, instances=4, holder=("team-a", "uid-a"))
    decision = decide(inputs(workload("team-b"), held, settings()))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
    assert decision.pool_change is PoolChange.NONE


def test_the_owner_namespace_reuses_its_own_warm_set() -> None:
    decision = decide(
        inputs(workload("team-a"), pool("team-a", phase=Phase.KEEP_WARM, instances=4), settings())
    )
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.reuses_warm_set
    assert decision.owner_namespace is None  # already bound: never a change of owner


@pytest.mark.parametrize(
    "shared",
    [
        [{"pool": "pool-a", "namespaces": ["team-b"]}],
        [{"pool": "pool-*", "namespaces": ["team-c", "team-b"]}],
        [{"pool": "*", "namespaces": ["*"]}],
    ],
    ids=["by-name", "by-glob", "everything"],
)
def test_a_pool_the_installer_shares_is_claimed_with_its_warm_set(
    shared: list[dict[str, Any]],
) -> None:
    warm = pool("team-a", phase=Phase.KEEP_WARM, instances=4)
    decision = decide(inputs(workload("team-b"), warm, settings(shared)))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.reuses_warm_set
    assert decision.owner_namespace is None  # still team-a's


@pytest.mark.parametrize(
    "shared",
    [
        [{"pool": "pool-a", "namespaces": ["team-c"]}],
        [{"pool": "other-*", "namespaces": ["team-b"]}],
        [{"pool": "pool-ab", "namespaces": ["team-b"]}],
    ],
    ids=["other-namespace", "other-glob", "other-name"],
)
def test_sharing_another_pool_or_namespace_does_not_share_this_one(
    shared: list[dict[str, Any]],
) -> None:
    decision = decide(inputs(workload("team-b"), pool("team-a"), settings(shared)))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
    assert decision.pool_change is PoolChange.NONE


def test_a_claim_held_after_sharing_was_withdrawn_is_released_and_rejected() -> None:
    held = pool("team-a", phase=Phase.SATISFIED, instances=4, holder=("team-b", "uid-b"))
    decision = decide(inputs(workload("team-b"), held, settings()))
    assert decision.pool_change is PoolChange.RELEASE
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED


# -- pools made before pools belonged to a namespace ------------------------------------------
def test_an_unowned_empty_pool_is_bound_by_its_next_claim() -> None:
    decision = decide(inputs(workload("team-b"), pool(None), settings()))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.owner_namespace == "team-b"


def test_an_unowned_pool_is_bound_to_the_namespace_of_the_workload_holding_it() -> None:
    held = pool(None, phase=Phase.JOINING, instances=4, holder=("team-a", "uid-a"))
    decision = decide(inputs(workload("team-a", uid="uid-a"), held, settings()))
    assert decision.pool_change is PoolChange.BIND
    assert decision.owner_namespace == "team-a"
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING


def test_an_unowned_pool_held_by_another_live_workload_is_busy() -> None:
    held = pool(None, phase=Phase.SATISFIED, instances=4, holder=("team-a", "uid-a"))
    decision = decide(inputs(workload("team-b"), held, settings()))
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    # Its holder's next pass binds it to team-a; the waiting Workload binds nothing.
    assert decision.pool_change is PoolChange.NONE and decision.owner_namespace is None


@pytest.mark.parametrize("stale_claim", [False, True], ids=["unclaimed", "stale-claim"])
def test_warm_nodes_of_an_unowned_pool_go_to_no_namespace(stale_claim: bool) -> None:
    holder = ("team-a", "uid-gone") if stale_claim else None
    warm = pool(
        None,
        phase=Phase.KEEP_WARM,
        instances=4,
        holder=holder,
        keep_warm_until="2026-11-29T12:10:00Z",
    )
    decision = decide(inputs(workload("team-b"), warm, settings(), claimant_exists=False))
    assert decision.pool_change is PoolChange.NONE and not decision.reuses_warm_set
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    assert decision.check.reason == c.EventReason.WARM_NODES_OF_UNKNOWN_NAMESPACE
    assert "2026-11-29T12:10:00Z" in decision.check.message
    assert "not handed to namespace team-b" in decision.check.message
