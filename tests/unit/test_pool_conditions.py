"""The pool's conditions and observedGeneration, one row per state the pool can be in: what
`kubectl wait`, Argo CD and Flux read, derived from the status the reconciler writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api.constants import FailureKind, Phase, PoolCondition
from provisioner.api.gangnodepool import GangNodePoolStatus
from provisioner.api.meta import find_condition
from provisioner.controllers.pool.conditions import observed
from tests.support.pool_views import IDS, NOW, active, view

SPEC = view().spec
LATER = NOW + timedelta(minutes=3)


def status(phase: Phase, **fields: Any) -> GangNodePoolStatus:
    return GangNodePoolStatus.model_validate({"phase": phase, **fields})


def error(reason: str, kind: FailureKind | None, operation: str | None = "record") -> Any:
    body: dict[str, Any] = {"reason": reason, "message": "it failed"}
    if kind is not None:
        body["kind"] = kind.value
    if operation is not None:
        body["operation"] = operation
    return body


@dataclass(frozen=True)
class Row:
    name: str
    given: GangNodePoolStatus
    ready: tuple[str, str]  # status, reason
    progressing: tuple[str, str]
    degraded: tuple[str, str]


ROWS = [
    Row(
        "an idle pool holds nothing and is not ready",
        status(Phase.IDLE),
        ("False", "Idle"),
        ("False", "Idle"),
        ("False", "NoFailure"),
    ),
    Row(
        "an acquiring pool progresses",
        status(Phase.ACQUIRING),
        ("False", "Acquiring"),
        ("True", "Acquiring"),
        ("False", "NoFailure"),
    ),
    Row(
        "a joining set with 3 of 4 nodes is not ready",
        status(Phase.JOINING, **active(), readyNodes=3),
        ("False", "Joining"),
        ("True", "Joining"),
        ("False", "NoFailure"),
    ),
    Row(
        "a satisfied set of 4 Ready nodes is ready",
        status(Phase.SATISFIED, **active(), readyNodes=4),
        ("True", "Satisfied"),
        ("False", "Satisfied"),
        ("False", "NoFailure"),
    ),
    Row(
        "a warm set of 4 Ready nodes is ready",
        status(Phase.KEEP_WARM, **active(), readyNodes=4, keepWarmUntil="2026-11-29T12:10:00Z"),
        ("True", "KeepWarm"),
        ("False", "KeepWarm"),
        ("False", "NoFailure"),
    ),
    Row(
        "a warm set with a node gone NotReady is not",
        status(Phase.KEEP_WARM, **active(), readyNodes=3),
        ("False", "KeepWarm"),
        ("False", "KeepWarm"),
        ("False", "NoFailure"),
    ),
    Row(
        "a releasing pool progresses",
        status(Phase.RELEASING, instanceIds=list(IDS)),
        ("False", "Releasing"),
        ("True", "Releasing"),
        ("False", "NoFailure"),
    ),
    Row(
        "a shortfall degrades by its kind",
        status(
            Phase.ACQUIRING,
            lastError=error("InsufficientInstanceCapacity", FailureKind.CAPACITY, "launch"),
        ),
        ("False", "Acquiring"),
        ("True", "Acquiring"),
        ("True", "CapacityShortfall"),
    ),
    Row(
        "a record failing on the state backend is a transient failure, Ready or not",
        status(
            Phase.SATISFIED,
            **active(recorded=False),
            readyNodes=4,
            lastError=error("BackendUnavailable", FailureKind.RETRYABLE),
        ),
        ("True", "Satisfied"),
        ("False", "Satisfied"),
        ("True", "TransientFailure"),
    ),
    Row(
        "a configuration failure",
        status(Phase.ACQUIRING, lastError=error("InvalidAMIID", FailureKind.CONFIG, "launch")),
        ("False", "Acquiring"),
        ("True", "Acquiring"),
        ("True", "ConfigurationError"),
    ),
    Row(
        "a block that has not started is a wait, not a failure",
        status(
            Phase.ACQUIRING,
            lastError=error("CapacityBlockNotActive", FailureKind.NOT_ACTIVE, "launch"),
        ),
        ("False", "Acquiring"),
        ("True", "Acquiring"),
        ("False", "NoFailure"),
    ),
    Row(
        "a release planned before a block's end is not a failure",
        status(Phase.RELEASING, lastError=error("CapacityBlockEnding", None, None)),
        ("False", "Releasing"),
        ("True", "Releasing"),
        ("False", "NoFailure"),
    ),
    Row(
        "an error with no kind (a block with no time left) is named by its reason",
        status(Phase.IDLE, lastError=error("CapacityBlockEnded", None, None)),
        ("False", "Idle"),
        ("False", "Idle"),
        ("True", "CapacityBlockEnded"),
    ),
    Row(
        "an error whose reason is no CamelCase word is kept to one",
        status(Phase.IDLE, lastError=error("Client.Bad-Thing", None, None)),
        ("False", "Idle"),
        ("False", "Idle"),
        ("True", "ClientBadThing"),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_conditions(row: Row) -> None:
    answered = observed(row.given, SPEC, 7, NOW)
    assert answered.observed_generation == 7
    got = {}
    for kind in PoolCondition:
        condition = find_condition(answered.conditions, kind)
        assert condition is not None, kind
        assert condition.observed_generation == 7 and condition.last_transition_time == NOW
        assert condition.message
        got[kind] = (condition.status, condition.reason)
    assert got == {
        PoolCondition.READY: row.ready,
        PoolCondition.PROGRESSING: row.progressing,
        PoolCondition.DEGRADED: row.degraded,
    }


def test_transition_time_moves_only_when_a_condition_changes_status() -> None:
    joining = observed(status(Phase.JOINING, **active(), readyNodes=3), SPEC, 1, NOW)
    # Still joining a minute later, one more node Ready, a new generation: same statuses.
    still = observed(joining.model_copy(update={"ready_nodes": 4}), SPEC, 2, LATER)
    ready = find_condition(still.conditions, PoolCondition.READY)
    assert ready is not None and ready.last_transition_time == NOW
    assert ready.observed_generation == 2 and ready.message == "4/4 nodes Ready (Joining)."
    # Satisfied: Ready and Progressing flip and say when; Degraded keeps its time.
    satisfied = observed(still.model_copy(update={"phase": Phase.SATISFIED}), SPEC, 2, LATER)
    times = {c.type: c.last_transition_time for c in satisfied.conditions}
    assert times == {"Ready": LATER, "Progressing": LATER, "Degraded": NOW}
    # Nothing changed: the status is identical, so the reconciler writes nothing.
    assert observed(satisfied, SPEC, 2, LATER + timedelta(minutes=1)) == satisfied


def test_a_status_from_before_a_generation_was_known_keeps_its_own() -> None:
    answered = observed(status(Phase.IDLE, observedGeneration=4), SPEC, None, NOW)
    assert answered.observed_generation == 4
    assert {c.observed_generation for c in answered.conditions} == {4}
