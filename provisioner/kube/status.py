"""The one way a reconciler writes an object.

Every reconciler changes what it owns through these (the Workload reconciler the pool's
spec and its admission-check entry, the AdmissionCheck reconciler its `Active` condition,
the GangNodePool reconciler its status, finalizers and its Nodes' group label). The caller
hands over the model it read and the model it wants (or, for `patch_status_entries`, the
RFC 6902 operations on an entry of a status list other controllers share). Nothing changed:
no request at all. Changed: one JSON merge patch holding only the difference, preconditioned
on the resourceVersion that was read, so a concurrent write surfaces as `KubeConflict` (the
caller requeues and reads again) instead of being overwritten. The answer comes back as a
model of the same type.

- `update_status` / `update_object`: the status subresource / everything but status.
- `patch_status_entries`: our entry of a shared status list (a Workload's admission checks).
- `create_object`, `read_object`: a new object, and a live read of one a cache lacks.
- `merge_patch`: the RFC 7386 difference the update helpers send.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from provisioner.api.meta import KubeModel, KubeObject, ObjectMeta
from provisioner.kube.resources import ResourceRef

__all__ = [
    "ObjectStore",
    "ObjectWriter",
    "create_object",
    "merge_patch",
    "patch_status_entries",
    "read_object",
    "read_version",
    "update_object",
    "update_status",
]

Obj = dict[str, Any]
M = TypeVar("M", bound=KubeObject)
# Fields a merge patch of the main resource leaves out: the kind is the ref's, and the
# status is written through its own subresource.
_NOT_PATCHED = ("apiVersion", "kind", "status")


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


class ObjectStore(ObjectWriter, Protocol):
    """The writer's calls, and the create and live read a reconciler may also need."""

    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = ...) -> Obj: ...

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj: ...


def update_status(
    client: ObjectWriter, ref: ResourceRef, read: M, status: KubeModel, field_manager: str
) -> M:
    """Write `status` as the object's status if it differs from the status of `read`.
    Returns the object the apiserver returned (`read` when nothing was written); raises
    `KubeConflict` when the object moved on since it was read."""
    before = read.fields_read().get("status") or {}
    diff = merge_patch(before, status.to_dict())
    if not diff:
        return read
    name, namespace, version = _identity_of(read.metadata)
    written = client.patch_status(
        ref,
        name,
        {"status": diff},
        namespace=namespace,
        resource_version=version,
        field_manager=field_manager,
    )
    return type(read).from_dict(written)


def update_object(
    client: ObjectWriter, ref: ResourceRef, read: M, wanted: M, field_manager: str
) -> M:
    """Like `update_status`, for everything but status (spec, labels, finalizers): `wanted`
    is `read` with those changed (`model_copy(update=...)`)."""
    before = _without(read.fields_read(), _NOT_PATCHED)
    diff = merge_patch(before, _without(wanted.to_dict(), _NOT_PATCHED))
    if not diff:
        return read
    name, namespace, version = _identity_of(read.metadata)
    written = client.patch(
        ref, name, diff, namespace=namespace, resource_version=version, field_manager=field_manager
    )
    return type(read).from_dict(written)


def patch_status_entries(
    client: ObjectWriter,
    ref: ResourceRef,
    read: M,
    operations: Sequence[Mapping[str, Any]] | None,
    field_manager: str,
) -> M:
    """Like `update_status`, for one entry of a status list other controllers share (our
    entry in a Workload's ``admissionChecks``): a merge patch would replace the whole list,
    so the change comes as RFC 6902 ``operations`` on the status subresource; the client
    adds the operation that pins the resourceVersion read. Nothing is written when there
    are none; `KubeConflict` when the object moved on since it was read.
    """
    if not operations:
        return read
    name, namespace, version = _identity_of(read.metadata)
    written = client.json_patch(
        ref,
        name,
        operations,
        namespace=namespace,
        resource_version=version,
        subresource="status",
        field_manager=field_manager,
    )
    return type(read).from_dict(written)


def create_object(client: ObjectStore, ref: ResourceRef, new: M) -> M:
    """Create `new` (its status, written through the subresource, is not sent);
    `KubeAlreadyExists` when the name is taken."""
    body = new.to_dict()
    body.pop("status", None)
    return type(new).from_dict(client.create(ref, body))


def read_object(
    client: ObjectStore,
    ref: ResourceRef,
    name: str,
    namespace: str | None,
    parse: Callable[[Obj], M],
) -> M:
    """The object as the apiserver holds it now, for one a cache has not seen;
    `KubeNotFound` when there is none."""
    return parse(client.get(ref, name, namespace=namespace))


def read_version(meta: ObjectMeta) -> str:
    """The resourceVersion a write is preconditioned on; ValueError when it was not read."""
    if not meta.resource_version:
        raise ValueError(f"{meta.name!r}: a write needs the resourceVersion that was read")
    return meta.resource_version


def _identity_of(meta: ObjectMeta) -> tuple[str, str | None, str]:
    return meta.name, meta.namespace or None, read_version(meta)


def _without(body: Obj, keys: Sequence[str]) -> Obj:
    return {key: value for key, value in body.items() if key not in keys}


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
