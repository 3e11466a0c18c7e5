"""The GangNodePool's conditions and observedGeneration, derived from the rest of its status.

`observed(status, spec, generation, now)` is a pure function the GangNodePool reconciler
applies to every status it writes, so the conditions always say what the phase, the set
and `lastError` say, and nothing else writes them:

- `Ready`: True while the whole set of N nodes is Ready (Satisfied, or KeepWarm with every
  warm node Ready): what `kubectl wait --for=condition=Ready gnp/<pool>` waits for.
- `Progressing`: True while the pool acquires, joins or releases a set (its phase's row in
  `phases.PHASES` says which).
- `Degraded`: True while an operation of the pool is failing; its reason is the failure's
  kind (`DegradedReason`). A capacity block that has not started, and a release planned
  before a block's end, are waits the user asked for, not failures.

Ready and Progressing take the phase as their reason. Each condition carries the generation
the status answers, and its lastTransitionTime moves only when its status does
(`set_condition`), so a pass that changes nothing writes nothing.
"""

from __future__ import annotations

import re
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.constants import DegradedReason, FailureKind, Phase, PoolCondition
from provisioner.api.gangnodepool import GangNodePoolSpec, GangNodePoolStatus, LastError
from provisioner.api.meta import Condition, ConditionStatus, set_condition
from provisioner.controllers.pool.phases import progressing
from provisioner.controllers.pool.status import changed

_DEGRADED_REASONS = {
    FailureKind.CAPACITY: DegradedReason.CAPACITY_SHORTFALL,
    FailureKind.MALFORMED: DegradedReason.PARTIAL_ANSWER,
    FailureKind.RETRYABLE: DegradedReason.TRANSIENT_FAILURE,
    FailureKind.CONFIG: DegradedReason.CONFIGURATION_ERROR,
    FailureKind.NOT_PREPARED: DegradedReason.STACK_NOT_PREPARED,
    FailureKind.UNKNOWN: DegradedReason.UNKNOWN_AWS_ERROR,
}
# What `lastError` may hold that is not a failure: a wait or a release the user planned.
_PLANNED_REASONS = frozenset({c.EventReason.CAPACITY_BLOCK_ENDING})


def observed(
    status: GangNodePoolStatus, spec: GangNodePoolSpec, generation: int | None, now: datetime
) -> GangNodePoolStatus:
    """`status` with its conditions and observedGeneration answering `generation`."""
    answered = generation if generation is not None else status.observed_generation
    conditions = status.conditions
    for condition_type, state, reason, message in (
        _ready(status, spec),
        _progressing(status, spec),
        _degraded(status.last_error),
    ):
        conditions = set_condition(
            conditions,
            Condition(
                type=condition_type,
                status=state,
                observed_generation=answered,
                last_transition_time=now,
                reason=reason,
                message=message,
            ),
        )
    return changed(status, observed_generation=answered, conditions=conditions)


_Answer = tuple[PoolCondition, ConditionStatus, str, str]


def _ready(status: GangNodePoolStatus, spec: GangNodePoolSpec) -> _Answer:
    n = spec.count
    whole = len(status.instance_ids) == n and status.ready_nodes == n
    phase = status.phase
    if whole and phase in (Phase.SATISFIED, Phase.KEEP_WARM):
        kept = "" if phase == Phase.SATISFIED else ", kept warm for the next claim"
        message = f"All {n} nodes of group {status.active_group} are Ready{kept}."
        return PoolCondition.READY, "True", phase.value, message
    if phase == Phase.IDLE:
        message = f"The pool holds no instances; a claim acquires {n}x {spec.instance_type}."
    else:
        message = f"{status.ready_nodes}/{n} nodes Ready ({phase.value})."
    return PoolCondition.READY, "False", phase.value, message


def _progressing(status: GangNodePoolStatus, spec: GangNodePoolSpec) -> _Answer:
    phase = status.phase
    if phase == Phase.ACQUIRING:
        message = f"Acquiring {spec.count}x {spec.instance_type} all-or-nothing."
    elif phase == Phase.JOINING:
        message = f"{status.ready_nodes}/{spec.count} nodes of group {status.active_group} Ready."
    elif phase == Phase.RELEASING:
        message = "Releasing the pool's instances."
    else:
        message = f"Settled in phase {phase.value}."
    state: ConditionStatus = "True" if progressing(phase) else "False"
    return PoolCondition.PROGRESSING, state, phase.value, message


def _degraded(error: LastError | None) -> _Answer:
    if error is None or error.reason in _PLANNED_REASONS or error.kind is FailureKind.NOT_ACTIVE:
        return (
            PoolCondition.DEGRADED,
            "False",
            DegradedReason.NO_FAILURE,
            "No operation of the pool is failing.",
        )
    # An error without a kind (a Capacity Block with no time left, or one written by an
    # older controller) is named by its own reason.
    reason = _DEGRADED_REASONS.get(error.kind, error.reason) if error.kind else error.reason
    what = f"{error.operation} failed" if error.operation else "failing"
    message = f"{what}: {error.reason}: {error.message}"
    return PoolCondition.DEGRADED, "True", _condition_reason(reason), message[:_MESSAGE_MAX]


# metav1.Condition's reason is CamelCase: letters, digits, '_', ',' and ':', starting with
# a letter; an error's own reason (an AWS code, an exception's name) is kept to that.
_MESSAGE_MAX = 32768


def _condition_reason(text: str) -> str:
    kept = re.sub(r"[^A-Za-z0-9_,:]", "", text).rstrip(",:")
    return kept if kept[:1].isalpha() else f"Failed{kept}"
