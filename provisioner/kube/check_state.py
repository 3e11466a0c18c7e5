"""Our entry in a Workload's `status.admissionChecks`: the RFC 6902 operations that set it,
and the write.

Kueue and every other admission check's controller write entries of the same list, so a
merge patch (which replaces a list whole) would overwrite theirs: our entry is written as
JSON-patch operations on its own fields, through `status.patch_status_entries`, which pins
the resourceVersion read (the client adds that operation). Called by the Workload
reconciler (`write_check_state`); `check_state_operations` is the pure part.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from provisioner.api import constants as c
from provisioner.api.constants import CheckState
from provisioner.api.meta import format_kube_time
from provisioner.api.workload import PodSetUpdate, Workload
from provisioner.kube.resources import WORKLOADS
from provisioner.kube.status import ObjectWriter, patch_status_entries, read_version

__all__ = ["JsonPatch", "check_state_operations", "write_check_state"]

JsonPatch = list[dict[str, Any]]


def check_state_operations(
    workload: Workload,
    check_name: str,
    *,
    state: CheckState,
    message: str,
    pod_set_updates: Sequence[PodSetUpdate] = (),
    now: datetime,
) -> JsonPatch | None:
    """The operations (content type `constants.JSON_PATCH_CONTENT_TYPE`) on the status
    subresource that set our check's state, message and podSetUpdates.

    Returns None when the entry already says exactly this, so nothing is written. Only our
    entry's own fields are touched: Kueue's retryCount and the other checks' entries stay as
    they are. Raises LookupError when Kueue has not added our entry yet (the ClusterQueue
    does not list our check, or Kueue has not caught up).
    """
    meta = workload.metadata
    index = next(
        (i for i, s in enumerate(workload.status.admission_checks) if s.name == check_name), None
    )
    if index is None:
        raise LookupError(
            f"Workload {meta.namespace}/{meta.name} has no admission check {check_name!r} yet"
        )
    current = workload.status.admission_checks[index]
    message = message[: c.CHECK_MESSAGE_MAX_LENGTH]
    updates = [u.to_dict() for u in pod_set_updates]
    current_updates = [u.to_dict() for u in current.pod_set_updates]
    if (current.state, current.message, current_updates) == (state, message, updates):
        return None
    base = f"/status/admissionChecks/{index}"
    ops: JsonPatch = [
        # Guards the index: with the same resourceVersion it cannot have moved, but a
        # wrong index must fail loudly rather than overwrite another controller's check.
        {"op": "test", "path": f"{base}/name", "value": check_name},
        {"op": "add", "path": f"{base}/state", "value": state},
        {"op": "add", "path": f"{base}/message", "value": message},
    ]
    if state != current.state or current.last_transition_time is None:
        ops.append(
            {
                "op": "add",
                "path": f"{base}/lastTransitionTime",
                "value": format_kube_time(now),
            }
        )
    if updates:
        ops.append({"op": "add", "path": f"{base}/podSetUpdates", "value": updates})
    elif current_updates:
        ops.append({"op": "remove", "path": f"{base}/podSetUpdates"})
    return ops


def write_check_state(
    client: ObjectWriter,
    workload: Workload,
    check_name: str,
    *,
    state: CheckState,
    message: str,
    pod_set_updates: Sequence[PodSetUpdate] = (),
    now: datetime,
    field_manager: str,
) -> Workload | None:
    """Set our check's entry on `workload` as read; the Workload written, or None when the
    entry already said this. The write is preconditioned on the version read: a Workload
    that changed since is a `KubeConflict` (re-read and decide again, never retry blindly).
    ValueError when `workload` was read without a resourceVersion."""
    read_version(workload.metadata)
    ops = check_state_operations(
        workload,
        check_name,
        state=state,
        message=message,
        pod_set_updates=pod_set_updates,
        now=now,
    )
    if ops is None:
        return None
    return patch_status_entries(client, WORKLOADS, workload, ops, field_manager)
