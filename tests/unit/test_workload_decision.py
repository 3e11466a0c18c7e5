"""Every branch of the Workload reconciler's decision, as a table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool, LastError, ReleaseInProgress
from provisioner.api.settings import Settings
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import (
    PoolChange,
    WorkloadInputs,
    decide,
)
from tests.support.backends import UNREACHED_BACKEND
from tests.support.jobs import job as job_body
from tests.support.pools import NODE_ROLE, claim, pool_spec
from tests.support.pools import pool as pool_body
from tests.support.workloads import check, condition
from tests.support.workloads import workload as wl_body

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CHECK = "atomic-gang-check"
SETTINGS = Settings.model_validate(
    {
        "clusterName": "prod",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
        "acquireAttemptsBeforeRetry": 3,
    }
)
LABELS = {c.POOL_LABEL: "pool-a", c.QUEUE_NAME_LABEL: "q"}
ANNOTATIONS = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


def workload(
    uid: str = "uid-1",
    *,
    conditions: dict[str, str] | None = None,
    check_state: str | None = c.CheckState.PENDING,
    count: int = 4,
    active: bool | None = None,
) -> Workload:
    conds = conditions if conditions is not None else {c.WL_QUOTA_RESERVED: "True"}
    body = wl_body(
        uid=uid,
        resource_version="7",
        count=count,
        owner=job_body(),
        active=active,
        conditions=[condition(t, s, reason="R") for t, s in conds.items()],
        checks=[check(CHECK, check_state)] if check_state else [],
    )
    return Workload.model_validate(body)


def pool(
    *,
    claim_uid: str | None = None,
    phase: str = Phase.IDLE,
    instance_type: str = "p4d.24xlarge",
    instances: int = 0,
    ready: int = 0,
    group: str | None = None,
    shortfalls: int = 0,
    owner: str | None = "ml",
) -> GangNodePool:
    claimed = (
        claim(name=f"wl-{claim_uid}", uid=claim_uid, claimed_at="2026-11-29T11:00:00Z")
        if claim_uid
        else None
    )
    ids = [f"i-{n:017x}" for n in range(instances)]
    status: dict[str, Any] = {
        "phase": phase,
        "instanceIds": ids,
        "readyNodes": ready,
        "consecutiveShortfalls": shortfalls,
    }
    if group:
        status["activeGroup"] = group
    body = pool_body(
        uid="pool-uid",
        spec=pool_spec(instance_type=instance_type, claim=claimed, owner_namespace=owner),
        status=status,
    )
    return GangNodePool.model_validate(body)


def inputs(wl: Workload | None, gnp: GangNodePool | None, **kw: Any) -> WorkloadInputs:
    return WorkloadInputs(
        workload=wl,
        check_name=CHECK,
        owner_labels=kw.get("labels", LABELS),
        owner_annotations=kw.get("annotations", ANNOTATIONS),
        pool=gnp,
        claimant_exists=kw.get("claimant_exists", True),
        settings=SETTINGS,
        now=NOW,
    )


@pytest.mark.parametrize(
    ("wl", "why"),
    [
        (None, "deleted"),
        (workload(conditions={c.WL_QUOTA_RESERVED: "True", c.WL_FINISHED: "True"}), "finished"),
        (workload(conditions={c.WL_QUOTA_RESERVED: "True", c.WL_EVICTED: "True"}), "evicted"),
        (workload(conditions={c.WL_QUOTA_RESERVED: "False"}), "no quota"),
        (workload(active=False), "deactivated"),
        (workload(check_state=c.CheckState.REJECTED), "rejected"),
        (workload(check_state=c.CheckState.RETRY), "retry"),
    ],
)
def test_workloads_that_may_not_hold_a_claim_release_theirs(wl: Workload | None, why: str) -> None:
    held = pool(claim_uid="uid-1", phase=Phase.SATISFIED)
    decision = decide(inputs(wl, held))
    if wl is None:
        # A deleted Workload is matched to its claim by the reconciler, not by decide().
        assert decision.pool_change is PoolChange.NONE
        return
    assert decision.pool_change is PoolChange.RELEASE
    assert why in decision.notes[0]
    assert decision.check is None


def test_a_finished_workload_does_not_touch_someone_elses_claim() -> None:
    wl = workload(conditions={c.WL_QUOTA_RESERVED: "True", c.WL_FINISHED: "True"})
    decision = decide(inputs(wl, pool(claim_uid="someone-else")))
    assert decision.pool_change is PoolChange.NONE


def test_invalid_gang_shape_is_rejected_with_the_key_named() -> None:
    decision = decide(inputs(workload(), None, annotations={c.ANN_COUNT: "four"}))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
    assert c.ANN_COUNT in decision.check.message
    assert decision.pool_change is PoolChange.NONE


def test_count_that_differs_from_the_pod_count_is_rejected() -> None:
    decision = decide(inputs(workload(count=3), None))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
    assert decision.check.reason == c.REASON_COUNT_MISMATCH


def test_no_pool_creates_one_with_this_claim() -> None:
    decision = decide(inputs(workload(), None))
    assert decision.pool_change is PoolChange.CREATE
    assert decision.pool_name == "pool-a"
    assert decision.shape is not None and decision.shape.count == 4
    assert decision.claim is not None and decision.claim.uid == "uid-1"
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING


def test_a_second_claimant_gets_retry_naming_the_holder() -> None:
    decision = decide(inputs(workload(uid="uid-2"), pool(claim_uid="uid-1")))
    assert decision.pool_change is PoolChange.NONE
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    assert "ml/wl-uid-1" in decision.check.message


def test_a_stale_claim_whose_workload_is_gone_is_replaced() -> None:
    decision = decide(inputs(workload(uid="uid-2"), pool(claim_uid="uid-1"), claimant_exists=False))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.claim is not None and decision.claim.uid == "uid-2"
    assert "stale" in decision.notes[0]


def test_a_different_shape_on_a_live_pool_is_rejected_naming_the_fields() -> None:
    busy = pool(phase=Phase.KEEP_WARM, instance_type="p5.48xlarge", instances=4, ready=4)
    decision = decide(inputs(workload(), busy))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED
    assert "instance-type" in decision.check.message
    assert "p5.48xlarge" in decision.check.message and "p4d.24xlarge" in decision.check.message


def test_a_different_shape_on_an_idle_empty_pool_reshapes_it() -> None:
    decision = decide(inputs(workload(), pool(instance_type="p5.48xlarge")))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.shape is not None and decision.shape.instance_type == "p4d.24xlarge"


def test_the_same_shape_claims_a_warm_pool() -> None:
    warm = pool(phase=Phase.KEEP_WARM, instances=4, ready=4, group="g2")
    decision = decide(
        inputs(workload(), warm, annotations={**ANNOTATIONS, c.ANN_KEEP_WARM_TTL: "1h"})
    )
    assert decision.pool_change is PoolChange.CLAIM


def test_a_claim_on_a_whole_warm_set_writes_no_progress_message() -> None:
    # The pool's Satisfied follows in one pass and brings the Ready write; a Pending
    # message first would hold that write behind a Workload write of its own.
    warm = pool(phase=Phase.KEEP_WARM, instances=4, ready=4, group="g2")
    decision = decide(inputs(workload(), warm))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.check is None
    assert decision.reuses_warm_set, "the claim's event says so: the pool writes none"


@pytest.mark.parametrize(
    ("instances", "ready"),
    [(4, 3), (3, 3)],
    ids=["a node not Ready", "an instance short"],
)
def test_a_claim_on_a_warm_set_that_is_not_whole_says_so(instances: int, ready: int) -> None:
    warm = pool(phase=Phase.KEEP_WARM, instances=instances, ready=ready, group="g2")
    decision = decide(inputs(workload(), warm))
    assert decision.pool_change is PoolChange.CLAIM
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING
    assert decision.check.message.startswith("Pool pool-a claimed; ")
    assert not decision.reuses_warm_set


def test_ready_only_when_satisfied_with_exactly_n_ready_nodes() -> None:
    ok = pool(claim_uid="uid-1", phase=Phase.SATISFIED, instances=4, ready=4, group="g2")
    decision = decide(inputs(workload(), ok))
    assert decision.check is not None and decision.check.state == c.CheckState.READY
    (update,) = decision.check.pod_set_updates
    assert update.node_selector == {c.POOL_LABEL: "pool-a", c.GROUP_LABEL: "g2"}
    assert update.tolerations[0].key == c.GANG_TAINT_KEY
    assert update.tolerations[0].value == "pool-a"


@pytest.mark.parametrize(
    ("phase", "instances", "ready"),
    [
        (Phase.SATISFIED, 4, 3),
        (Phase.SATISFIED, 3, 4),
        (Phase.JOINING, 4, 4),
        (Phase.ACQUIRING, 0, 0),
    ],
)
def test_anything_short_of_the_whole_gang_stays_pending(
    phase: str, instances: int, ready: int
) -> None:
    gnp = pool(claim_uid="uid-1", phase=phase, instances=instances, ready=ready, group="g2")
    decision = decide(inputs(workload(), gnp))
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING


def test_a_whole_set_whose_release_has_begun_readies_nothing() -> None:
    whole = pool(claim_uid="uid-1", phase=Phase.SATISFIED, instances=4, ready=4, group="g2")
    marker = ReleaseInProgress(
        started_at=NOW, reason="CapacityBlockEnding", instance_ids=whole.status.instance_ids
    )
    going = whole.model_copy(
        update={"status": whole.status.model_copy(update={"release_in_progress": marker})}
    )
    decision = decide(inputs(workload(), going))
    assert decision.check is not None and decision.check.state != c.CheckState.READY


def test_retry_after_the_configured_number_of_shortfalls() -> None:
    short = pool(claim_uid="uid-1", phase=Phase.ACQUIRING, shortfalls=2)
    assert decide(inputs(workload(), short)).check.state == c.CheckState.PENDING  # type: ignore[union-attr]
    short = pool(claim_uid="uid-1", phase=Phase.ACQUIRING, shortfalls=3)
    decision = decide(inputs(workload(), short))
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    assert "nothing was left running" in decision.check.message


def test_an_admitted_gang_that_loses_nodes_is_requeued() -> None:
    lost = pool(claim_uid="uid-1", phase=Phase.JOINING, instances=4, ready=3, group="g2")
    decision = decide(inputs(workload(check_state=c.CheckState.READY), lost))
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    assert "3/4" in decision.check.message


def test_the_owner_job_not_yet_visible_changes_nothing() -> None:
    decision = decide(inputs(workload(), None, labels=None, annotations=None))
    assert decision.pool_change is PoolChange.NONE and decision.check is None


def test_a_different_shape_on_a_busy_pool_is_rejected_not_retried() -> None:
    busy = pool(
        claim_uid="uid-1",
        phase=Phase.SATISFIED,
        instance_type="p5.48xlarge",
        instances=4,
        ready=4,
    )
    decision = decide(inputs(workload(uid="uid-2"), busy))
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED


def test_a_gang_released_for_its_ending_capacity_block_tells_the_workload_why() -> None:
    released = pool(claim_uid="uid-1", phase=Phase.ACQUIRING)
    why = "Capacity Block cr-0fedcba9876543210 (group g2) ends at 2026-11-29T14:00:00Z"
    released = released.model_copy(
        update={
            "status": released.status.model_copy(
                update={"last_error": LastError(reason="CapacityBlockEnding", message=why)}
            )
        }
    )
    decision = decide(inputs(workload(check_state=c.CheckState.READY), released))
    assert decision.check is not None and decision.check.state == c.CheckState.RETRY
    assert why in decision.check.message
    # Planned, not lost (the pool knew no record of the block to refuse it from).
    assert "released the gang as planned" in decision.check.message
    assert "lost its gang" not in decision.check.message
    assert decision.check.reason == c.EventReason.CAPACITY_BLOCK_ENDING


def test_a_gang_held_for_a_block_not_yet_active_stays_pending_with_the_start() -> None:
    held = pool(claim_uid="uid-1", phase=Phase.ACQUIRING)
    why = "Capacity Block cr-0fedcba9876543210 is scheduled and starts at 2026-11-29T12:20:00Z"
    held = held.model_copy(
        update={
            "status": held.status.model_copy(
                update={"last_error": LastError(reason="ReservationNotActive", message=why)}
            )
        }
    )
    decision = decide(inputs(workload(), held))
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING
    assert why in decision.check.message


def test_our_claim_on_a_whole_warm_set_waits_for_the_pool_without_a_message() -> None:
    # The pass our claim's own write brings sees the claim held and the pool not yet
    # answered: a "reusing warm nodes" message would be a Workload write of its own, ahead
    # of the Ready one the pool's Satisfied brings.
    claimed = pool(claim_uid="uid-1", phase=Phase.KEEP_WARM, instances=4, ready=4, group="g2")
    decision = decide(inputs(workload(), claimed))
    assert decision.pool_change is PoolChange.NONE
    assert decision.check is None


@pytest.mark.parametrize(
    ("instances", "ready"),
    [(4, 3), (3, 3)],
    ids=["a node not Ready", "an instance short"],
)
def test_our_claim_on_a_warm_set_that_is_not_whole_reports_progress(
    instances: int, ready: int
) -> None:
    claimed = pool(
        claim_uid="uid-1", phase=Phase.KEEP_WARM, instances=instances, ready=ready, group="g2"
    )
    decision = decide(inputs(workload(), claimed))
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING
    assert "reusing" in decision.check.message


def _with_generations(gnp: GangNodePool, generation: int, observed: int) -> GangNodePool:
    return gnp.model_copy(
        update={
            "metadata": gnp.metadata.model_copy(update={"generation": generation}),
            "status": gnp.status.model_copy(update={"observed_generation": observed}),
        }
    )


def test_a_satisfied_status_written_before_this_claim_readies_nothing() -> None:
    """The last claimant's Satisfied, still on the pool when the next Workload claims it
    (its claim released a moment before): the pool has not seen this claim yet."""
    whole = pool(claim_uid="uid-1", phase=Phase.SATISFIED, instances=4, ready=4, group="g2")
    stale = _with_generations(whole, generation=7, observed=6)
    decision = decide(inputs(workload(), stale))
    assert decision.check is None or decision.check.state != c.CheckState.READY
    # Once the pool's pass answers the spec that holds this claim, the gang is Ready.
    answered = _with_generations(whole, generation=7, observed=7)
    decision = decide(inputs(workload(), answered))
    assert decision.check is not None and decision.check.state == c.CheckState.READY


def test_a_ready_gang_stays_ready_through_a_spec_change_the_pool_has_not_answered() -> None:
    whole = pool(claim_uid="uid-1", phase=Phase.SATISFIED, instances=4, ready=4, group="g2")
    changed = _with_generations(whole, generation=8, observed=7)
    decision = decide(inputs(workload(check_state=c.CheckState.READY), changed))
    assert decision.check is not None and decision.check.state == c.CheckState.READY
