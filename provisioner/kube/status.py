"""The one way a reconciler writes an object: `write_status`, `write_object`, and
`patch_status_entries` for an entry of a status list other controllers share.

Every reconciler changes what it owns through these (the GangNodePool reconciler its
status, the Workload reconciler the pool's spec and its admission-check entry, finalizers).
The caller hands over the object as it read it and a `mutate` closure that edits a deep
copy and answers "did anything change?". Nothing changed: no request at all. Changed: one
JSON merge patch holding only the difference, preconditioned on the resourceVersion that
was read, so a concurrent write surfaces as `KubeConflict` (the caller requeues and reads
again) instead of being overwritten.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from provisioner.kube.resources import ResourceRef

__all__ = ["ObjectWriter", "merge_patch", "patch_status_entries", "write_object", "write_status"]

Obj = dict[str, Any]
Mutate = Callable[[Obj], bool]


class ObjectWriter(Protocol):
    """The two `KubeClient` calls the helpers use (tests hand a fake)."""

    def patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = ...,
        resource_version: str,
        field_manager: str | None = ...,
    ) -> Obj: ...

    def patch_status(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = ...,
        resource_version: str,
        field_manager: str | None = ...,
    ) -> Obj: ...

    def json_patch(
        self,
        ref: ResourceRef,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = ...,
        resource_version: str,
        subresource: str = ...,
        field_manager: str | None = ...,
    ) -> Obj: ...


def write_status(
    client: ObjectWriter,
    ref: ResourceRef,
    obj: Mapping[str, Any],
    mutate: Mutate,
    field_manager: str,
) -> Obj:
    """Apply `mutate` to a copy of `obj["status"]`; patch the status subresource if it
    changed. Returns the object the apiserver returned (or `obj` when nothing was written);
    raises `KubeConflict` when the object moved on since it was read."""
    before = obj.get("status") or {}
    after = copy.deepcopy(before)
    if not mutate(after):
        return dict(obj)
    diff = merge_patch(before, after)
    if not diff:
        return dict(obj)
    name, namespace, version = _identity(obj)
    return client.patch_status(
        ref,
        name,
        {"status": diff},
        namespace=namespace,
        resource_version=version,
        field_manager=field_manager,
    )


def patch_status_entries(
    client: ObjectWriter,
    ref: ResourceRef,
    obj: Mapping[str, Any],
    operations: Sequence[Mapping[str, Any]] | None,
    field_manager: str,
) -> Obj:
    """Like `write_status`, for one entry of a status list other controllers share (our
    entry in a Workload's ``admissionChecks``): a merge patch would replace the whole list,
    so the change comes as RFC 6902 ``operations`` on the status subresource. Nothing is
    written when there are none; `KubeConflict` when the object moved on since it was read.
    """
    if not operations:
        return dict(obj)
    name, namespace, version = _identity(obj)
    return client.json_patch(
        ref,
        name,
        operations,
        namespace=namespace,
        resource_version=version,
        subresource="status",
        field_manager=field_manager,
    )


def write_object(
    client: ObjectWriter,
    ref: ResourceRef,
    obj: Mapping[str, Any],
    mutate: Mutate,
    field_manager: str,
) -> Obj:
    """Like `write_status`, for everything but status (spec, labels, finalizers)."""
    before = {key: value for key, value in obj.items() if key != "status"}
    after = copy.deepcopy(before)
    if not mutate(after):
        return dict(obj)
    after.pop("status", None)  # the main resource ignores status; don't pretend to write it
    diff = merge_patch(before, after)
    if not diff:
        return dict(obj)
    name, namespace, version = _identity(obj)
    return client.patch(
        ref, name, diff, namespace=namespace, resource_version=version, field_manager=field_manager
    )


def merge_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> Obj:
    """The RFC 7386 merge patch turning `before` into `after` (removed keys become null,
    lists are replaced whole); empty when they are equal."""
    patch: Obj = {key: None for key in before if key not in after}
    for key, value in after.items():
        if key not in before:
            patch[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(before[key], Mapping):
            nested = merge_patch(before[key], value)
            if nested:
                patch[key] = nested
        elif value != before[key]:
            patch[key] = copy.deepcopy(value)
    return patch


def _identity(obj: Mapping[str, Any]) -> tuple[str, str | None, str]:
    meta = obj.get("metadata") or {}
    version = meta.get("resourceVersion")
    if not version:
        raise ValueError(f"{meta.get('name')!r}: a write needs the resourceVersion that was read")
    return meta["name"], meta.get("namespace") or None, str(version)
