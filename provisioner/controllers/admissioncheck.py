"""AdmissionCheck reconciler: tells Kueue this controller is present.

Watches: AdmissionChecks (all; those whose spec.controllerName is not ours are skipped first).
Writes, alone: the `Active` condition of our AdmissionChecks.

Kueue marks a ClusterQueue inactive — and admits nothing through it — while one of its checks
is not Active, so this reconciler is what makes the rest reachable. It runs only on the
elected leader, which is the replica doing the work the condition vouches for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.meta import Condition, set_condition
from provisioner.api.workload import AdmissionCheck
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ADMISSION_CHECKS, ObjectKey
from provisioner.kube.status import ObjectWriter, update_status
from provisioner.kube.workqueue import Result

log = logging.getLogger(__name__)

ACTIVE_REASON = c.AC_ACTIVE_REASON


def active_condition(now: datetime, generation: int | None) -> Condition:
    return Condition(
        type=c.AC_ACTIVE,
        status="True",
        reason=ACTIVE_REASON,
        message=f"{c.CONTROLLER_NAME} is running and holds the leader lease.",
        last_transition_time=now,
        observed_generation=generation,
    )


class AdmissionCheckReconciler:
    def __init__(
        self,
        kube: ObjectWriter,
        checks: TypedCache[AdmissionCheck],
        controller_name: str,
        now: Callable[[], datetime],
    ) -> None:
        self._kube = kube
        self._checks = checks
        self._controller_name = controller_name
        self._now = now

    def reconcile(self, key: ObjectKey) -> Result:
        check = self._checks.get(key.namespace or "", key.name)
        if check is None or not check.is_ours(self._controller_name):
            return Result()
        wanted = active_condition(self._now(), check.metadata.generation)
        current = check.status.conditions
        updated = set_condition(current, wanted)
        if updated == current:
            return Result()
        status = check.status.model_copy(update={"conditions": updated})
        update_status(self._kube, ADMISSION_CHECKS, check, status, c.FIELD_MANAGER)
        return Result()
