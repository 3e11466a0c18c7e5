"""The Workload decision for a gang read through the GangClass its check names: a Job with
only the queue label gets a derived pool of its pod count; a forbidden annotation and an
unusable class each get the answer they deserve, as a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import CheckState, Phase
from provisioner.api.gang_class import FieldSource, GangClass
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolSpec
from provisioner.controllers.workload.decision import PoolChange, WorkloadInputs, decide
from tests.unit.test_workload_decision import CHECK, NOW, SETTINGS, pool, workload

GPU = GangClass.from_dict(
    {
        "metadata": {"name": "gpu"},
        "spec": {"instanceType": "p4d.24xlarge", "jobOverrides": ["keep-warm-ttl"]},
    }
)
QUEUE_ONLY = {c.QUEUE_NAME_LABEL: "q"}


def inputs(gnp: GangNodePool | None = None, **kw: Any) -> WorkloadInputs:
    return WorkloadInputs(
        workload=workload(count=kw.get("pods", 4)),
        check_name=CHECK,
        owner_labels=kw.get("labels", QUEUE_ONLY),
        owner_annotations=kw.get("annotations", {}),
        pool=gnp,
        claimant_exists=True,
        settings=SETTINGS,
        now=NOW,
        gang_class=kw.get("gang_class", GPU),
        class_problem=kw.get("class_problem"),
    )


@dataclass(frozen=True)
class Row:
    name: str
    kw: dict[str, Any] = field(default_factory=dict)
    change: PoolChange = PoolChange.NONE
    state: CheckState | None = None
    words: tuple[str, ...] = ()


ROWS = [
    Row(
        "queue label only: a derived pool of the pods' count",
        change=PoolChange.CREATE,
        state=CheckState.PENDING,
        words=("acquiring 4x p4d.24xlarge",),
    ),
    Row(
        "an annotation the class forbids: Rejected naming the class",
        kw={"annotations": {c.ANN_INSTANCE_TYPE: "m5.large"}},
        state=CheckState.REJECTED,
        words=("GangClass gpu", "spec.jobOverrides"),
    ),
    Row(
        "an allowed annotation: the pool is made",
        kw={"annotations": {c.ANN_KEEP_WARM_TTL: "5m"}},
        change=PoolChange.CREATE,
        state=CheckState.PENDING,
    ),
    Row(
        "a count that is not the pods': Rejected",
        kw={"annotations": {c.ANN_COUNT: "8"}},
        state=CheckState.REJECTED,
        words=("runs 4 pods",),
    ),
    Row(
        "a class that cannot serve: Pending naming it, nothing made",
        kw={"class_problem": "GangClass gpu does not exist."},
        state=CheckState.PENDING,
        words=("GangClass gpu does not exist",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_a_gang_of_a_class(row: Row) -> None:
    decision = decide(inputs(**row.kw))
    assert decision.pool_change is row.change
    assert (decision.check.state if decision.check else None) == row.state
    for words in row.words:
        assert decision.check is not None and words in decision.check.message
    if row.change is PoolChange.CREATE:
        assert decision.read is not None and decision.read.gang_class == "gpu"
        assert decision.pool_name is not None and decision.pool_name.startswith("ml-gpu-p4d")
        assert decision.shape is not None and decision.shape.count == 4
        assert decision.read.sources["pool"] == FieldSource.DERIVED
        spec = GangNodePoolSpec.of(decision.shape, decision.claim, "ml", None, decision.read)
        body = spec.to_dict()
        assert body["gangClass"] == "gpu"
        assert body["fieldSources"]["instance-type"] == "class"
        assert body["fieldSources"]["count"] == "pods"


def test_a_second_job_of_the_same_shape_claims_the_warm_pool_the_first_made() -> None:
    first = decide(inputs())
    assert first.pool_name is not None and first.shape is not None
    warm = pool(phase=Phase.KEEP_WARM, instances=4, ready=4, group="g1")
    spec = warm.spec.model_copy(update={"pool": first.pool_name, "owner_namespace": "ml"})
    warm = warm.model_copy(update={"spec": spec, "metadata": warm.metadata})
    # The second Job spells one field differently but allowed: keep-warm-ttl is not shape.
    second = decide(inputs(warm, annotations={c.ANN_KEEP_WARM_TTL: "1m"}))
    assert second.pool_change is PoolChange.CLAIM and second.reuses_warm_set
    # The reconciler reads the pool by this name: the same derived pool.
    assert second.shape is not None and second.shape.pool == first.pool_name
