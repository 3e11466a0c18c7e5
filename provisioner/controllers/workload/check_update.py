"""What the Workload reconciler writes to our check on a Workload: one state, its message
and the reason of the Event that tells it (`decision.decide` answers one)."""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.api.constants import CheckState
from provisioner.api.workload import PodSetUpdate

__all__ = ["CheckUpdate"]


@dataclass(frozen=True)
class CheckUpdate:
    state: CheckState
    message: str
    # The reason of the Event recorded with a state change: an `EventReason`, or the
    # machine reason a refusal carries (`GangShapeError.reason`, a tenancy problem's).
    reason: str
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
