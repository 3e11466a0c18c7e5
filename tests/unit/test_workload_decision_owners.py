"""The decision for a Workload by the kind of its owner: any supported kind reads the same
gang (a JobSet's pod sets all counted), and any other kind, or none, is Rejected once with
the kinds that are supported; never a pool, and never a Pending that waits forever."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.owners import JOBSET, PYTORCH_JOB, TRAIN_JOB, OwnerKind
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import PoolChange, decide
from tests.support.owners import foreign_owner, owner
from tests.support.workloads import check, condition
from tests.support.workloads import workload as wl_body
from tests.unit.test_workload_decision import ANNOTATIONS, CHECK, LABELS, inputs, pool

pytestmark = pytest.mark.unit


def owned_by(
    body: dict[str, Any] | None,
    *,
    state: str = c.CheckState.PENDING,
    pod_sets: list[tuple[str, int]] | None = None,
) -> Workload:
    return Workload.model_validate(
        wl_body(
            uid="uid-1",
            resource_version="7",
            owner=body,
            pod_sets=pod_sets,
            conditions=[condition(c.WL_QUOTA_RESERVED, reason="R")],
            checks=[check(CHECK, state)],
        )
    )


FOREIGN = [
    foreign_owner("apps/v1", "ReplicaSet"),
    foreign_owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    foreign_owner("kubeflow.org/v1", "TFJob"),
    None,  # no owner at all
]


@pytest.mark.parametrize("body", FOREIGN, ids=["replicaset", "lws", "tfjob", "no-owner"])
def test_an_unsupported_owner_is_rejected_naming_the_supported_kinds(
    body: dict[str, Any] | None,
) -> None:
    # Even with labels the decision could read: the owner is not a gang of ours.
    decision = decide(inputs(owned_by(body), None, labels=None, annotations=None))
    assert decision.pool_change is PoolChange.NONE and decision.pool_name is None
    assert not decision.owner_not_visible
    assert decision.check is not None
    assert decision.check.state == c.CheckState.REJECTED
    assert decision.check.reason == c.EventReason.UNSUPPORTED_OWNER_KIND
    message = decision.check.message
    assert "jobset.x-k8s.io/v1alpha2 JobSet" in message and "batch/v1 Job" in message
    own = f"{body['apiVersion']} {body['kind']}" if body else "has no owner"
    assert own in message


@pytest.mark.parametrize("body", FOREIGN, ids=["replicaset", "lws", "tfjob", "no-owner"])
def test_once_rejected_it_is_left_alone(body: dict[str, Any] | None) -> None:
    decision = decide(inputs(owned_by(body, state=c.CheckState.REJECTED), None))
    assert decision.check is None and decision.pool_change is PoolChange.NONE
    assert not decision.owner_not_visible


def test_an_unsupported_owner_holding_a_claim_releases_it() -> None:
    held = pool(claim_uid="uid-1", phase=Phase.SATISFIED, instances=4, ready=4, group="g")
    decision = decide(inputs(owned_by(FOREIGN[0]), held))
    assert decision.pool_change is PoolChange.RELEASE
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED


@pytest.mark.parametrize("kind", [JOBSET, PYTORCH_JOB, TRAIN_JOB], ids=lambda k: k.kind)
def test_a_supported_owner_not_visible_yet_is_looked_at_again(kind: OwnerKind) -> None:
    decision = decide(inputs(owned_by(owner(kind)), None, labels=None, annotations=None))
    assert decision.owner_not_visible and decision.check is None


@pytest.mark.parametrize(
    ("kind", "pod_sets"),
    [
        (JOBSET, [("leader", 1), ("workers", 3)]),
        (PYTORCH_JOB, [("master", 1), ("worker", 3)]),
        (TRAIN_JOB, [("node", 4)]),
    ],
    ids=["jobset", "pytorchjob", "trainjob"],
)
def test_every_pod_set_is_the_gang(kind: OwnerKind, pod_sets: list[tuple[str, int]]) -> None:
    wl = owned_by(owner(kind), pod_sets=pod_sets)
    decision = decide(inputs(wl, None))
    assert decision.pool_change is PoolChange.CREATE
    assert decision.shape is not None and decision.shape.count == 4
    # count "3" is not the 4 pods of every pod set: refused with the number to use.
    short = decide(inputs(wl, None, annotations={**ANNOTATIONS, c.ANN_COUNT: "3"}))
    assert short.pool_change is PoolChange.NONE
    assert short.check is not None and short.check.state == c.CheckState.REJECTED
    assert "4" in short.check.message


def test_labels_are_those_of_the_top_level_object() -> None:
    # The same labels, whatever kind carries them: the pool is the one they name.
    wl = owned_by(owner(JOBSET, labels=LABELS), pod_sets=[("leader", 1), ("workers", 3)])
    decision = decide(inputs(wl, None))
    assert decision.pool_name == LABELS[c.POOL_LABEL]
