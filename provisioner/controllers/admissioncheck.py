"""AdmissionCheck reconciler: tells Kueue this controller is present, and whether the
GangClass its check names can serve a gang.

Watches: AdmissionChecks (all; those whose spec.controllerName is not ours are skipped
first), and GangClasses (the manager maps a class's change to the checks naming it).
Writes, alone: the `Active` condition of our AdmissionChecks.

Kueue marks a ClusterQueue inactive — and admits nothing through it — while one of its checks
is not Active, so this reconciler is what makes the rest reachable. As Kueue's own
provisioning check does for a missing ProvisioningRequestConfig, a check whose
`spec.parameters` name a GangClass that is missing, or that no Job could use
(`api.gang_class.check_class`), is Active=False with the reason and the fix: nothing is
admitted on a class that would refuse every gang. It runs only on the elected leader, which
is the replica doing the work the condition vouches for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.gang_class import GangClass, check_class
from provisioner.api.meta import Condition, set_condition
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ADMISSION_CHECKS, ObjectKey
from provisioner.kube.status import ObjectWriter, update_status
from provisioner.kube.workqueue import Result

log = logging.getLogger(__name__)

ACTIVE_REASON = c.AC_ACTIVE_REASON


def active_condition(
    now: datetime,
    generation: int | None,
    reason: str | None = None,
    message: str | None = None,
) -> Condition:
    """Active=True, or, with a `reason`, Active=False saying why."""
    return Condition(
        type=c.AC_ACTIVE,
        status="True" if reason is None else "False",
        reason=reason or ACTIVE_REASON,
        message=message or f"{c.CONTROLLER_NAME} is running and holds the leader lease.",
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
        *,
        classes: Callable[[str], GangClass | None],
        settings: Settings,
    ) -> None:
        self._kube = kube
        self._checks = checks
        self._controller_name = controller_name
        self._now = now
        self._classes = classes
        self._settings = settings

    def keys_for_class(self, gang_class: GangClass) -> list[ObjectKey]:
        """Our checks that name `gang_class` in their parameters."""
        return [
            ObjectKey("", check.metadata.name)
            for check in self._checks.list()
            if check.is_ours(self._controller_name)
            and check.spec.parameters is not None
            and check.spec.parameters.name == gang_class.name
        ]

    def reconcile(self, key: ObjectKey) -> Result:
        check = self._checks.get(key.namespace or "", key.name)
        if check is None or not check.is_ours(self._controller_name):
            return Result()
        name, parameters = check.metadata.name, check.spec.parameters
        named = check_class(name, parameters, self._classes, self._settings)
        wanted = active_condition(
            self._now(), check.metadata.generation, named.reason, named.message
        )
        current = check.status.conditions
        updated = set_condition(current, wanted)
        if updated == current:
            return Result()
        if named.reason is not None:
            log.warning("AdmissionCheck %s not Active: %s", check.metadata.name, named.message)
        status = check.status.model_copy(update={"conditions": updated})
        update_status(self._kube, ADMISSION_CHECKS, check, status, c.FIELD_MANAGER)
        return Result()
