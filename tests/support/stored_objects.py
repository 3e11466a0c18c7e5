"""`StoredObjects`: the API server's object store in a dict, for the write helpers' tests.

It answers the `KubeClient` calls the helpers make (`get`, `create`, `patch`,
`patch_status`, `json_patch`) as the API server does: a write at a resourceVersion other
than the stored one is a `KubeConflict`, a merge patch is applied by RFC 7386 and a JSON
patch by RFC 6902 (test, add, replace, remove), and every accepted write moves the
resourceVersion on. Each call is recorded in `calls`; `conflict_next` refuses the next
write; `reset()` forgets everything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.kube.errors import KubeAlreadyExists, KubeConflict, KubeInvalid, KubeNotFound
from provisioner.kube.resources import ResourceRef

__all__ = ["Call", "StoredObjects", "apply_json_patch", "apply_merge_patch"]

Obj = dict[str, Any]
Call = dict[str, Any]


def apply_merge_patch(target: Obj, patch: Mapping[str, Any]) -> Obj:
    """RFC 7386: null removes, a map merges, anything else replaces."""
    merged = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = apply_merge_patch(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_json_patch(target: Obj, operations: Sequence[Mapping[str, Any]]) -> Obj:
    """RFC 6902's test, add, replace and remove; a failed test is `KubeInvalid`."""
    doc = copy.deepcopy(target)
    for op in operations:
        *parents, last = op["path"].strip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if op["op"] == "test":
            if node[key] != op["value"]:
                raise KubeInvalid(f"test failed at {op['path']}")
        elif op["op"] in ("add", "replace"):
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[key]
    return doc


class StoredObjects:
    """Objects by (resource plural, namespace, name), with resourceVersions and conflicts."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[Call] = []
        self.version = 0
        self.conflict_next = False

    def reset(self) -> None:
        self.objects.clear()
        self.calls.clear()
        self.version = 0
        self.conflict_next = False

    def put(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
        """Store `body` as it is (its resourceVersion kept, or the next one given)."""
        stored = copy.deepcopy(dict(body))
        meta = stored.setdefault("metadata", {})
        if not meta.get("resourceVersion"):
            meta["resourceVersion"] = self._next_version()
        else:
            self.version = max(self.version, int(meta["resourceVersion"]))
        self.objects[self._key(ref, meta.get("namespace"), meta["name"])] = stored
        return copy.deepcopy(stored)

    def body(self, ref: ResourceRef, name: str, namespace: str | None = None) -> Obj:
        return copy.deepcopy(self.objects[self._key(ref, namespace, name)])

    # -- the client's calls -----------------------------------------------------------------
    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> Obj:
        self.calls.append({"verb": "get", "ref": ref, "name": name, "namespace": namespace})
        key = self._key(ref, namespace, name)
        if key not in self.objects:
            raise KubeNotFound(f"{ref.plural} {name!r} not found")
        return copy.deepcopy(self.objects[key])

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
        self.calls.append({"verb": "create", "ref": ref, "body": copy.deepcopy(dict(body))})
        meta = body.get("metadata") or {}
        if self._key(ref, meta.get("namespace"), meta["name"]) in self.objects:
            raise KubeAlreadyExists(f"{ref.plural} {meta['name']!r} already exists")
        stored = {"apiVersion": ref.api_version, "kind": ref.kind, **copy.deepcopy(dict(body))}
        stored["metadata"] = {**stored["metadata"], "uid": f"uid-{meta['name']}"}
        stored["metadata"].pop("resourceVersion", None)
        return self.put(ref, stored)

    def patch(self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any) -> Obj:
        return self._write("patch", ref, name, patch, kw, lambda obj: _merge(obj, patch, False))

    def patch_status(self, ref: ResourceRef, name: str, patch: Mapping[str, Any], **kw: Any) -> Obj:
        return self._write(
            "patch_status", ref, name, patch, kw, lambda obj: _merge(obj, patch, True)
        )

    def json_patch(
        self, ref: ResourceRef, name: str, operations: Sequence[Mapping[str, Any]], **kw: Any
    ) -> Obj:
        ops = [dict(op) for op in operations]
        return self._write("json_patch", ref, name, ops, kw, lambda obj: apply_json_patch(obj, ops))

    # -- plumbing ---------------------------------------------------------------------------
    def _write(
        self, verb: str, ref: ResourceRef, name: str, patch: Any, kw: Mapping[str, Any], change: Any
    ) -> Obj:
        self.calls.append(
            {"verb": verb, "ref": ref, "name": name, "patch": copy.deepcopy(patch), **kw}
        )
        key = self._key(ref, kw.get("namespace"), name)
        if key not in self.objects:
            raise KubeNotFound(f"{ref.plural} {name!r} not found")
        stored = self.objects[key]
        if self.conflict_next or stored["metadata"]["resourceVersion"] != kw["resource_version"]:
            self.conflict_next = False
            raise KubeConflict(f"{ref.plural} {name!r}: the object has been modified")
        written = change(stored)
        written["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = written
        return copy.deepcopy(written)

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    @staticmethod
    def _key(ref: ResourceRef, namespace: str | None, name: str) -> tuple[str, str, str]:
        return ref.plural, (namespace or "") if ref.namespaced else "", name


def _merge(obj: Obj, patch: Mapping[str, Any], status: bool) -> Obj:
    """A merge patch of the main resource ignores status; of the subresource, all but it."""
    if status:
        return {**obj, "status": apply_merge_patch(obj.get("status") or {}, patch["status"])}
    kept = obj.get("status")
    merged = apply_merge_patch(obj, {k: v for k, v in patch.items() if k != "status"})
    if kept is not None:
        merged["status"] = kept
    return merged
