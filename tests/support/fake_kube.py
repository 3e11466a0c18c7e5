"""The Kubernetes reads the operator commands make (doctor, explain, discovery), in memory.

`FakeKube` answers `get` and `list` as `KubeClient` does, over the objects a test hands
in: matched by kind, by namespace for namespaced resources, and by label and field
selectors of the `a=b,c.d=e` form; a miss is `KubeNotFound`, as from the apiserver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.kube.client import ObjectList
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import ResourceRef


def _field(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _selected(obj: Mapping[str, Any], labels: str | None, fields: str | None) -> bool:
    wanted = [p.split("=", 1) for p in (labels or "").split(",") if p]
    have = obj["metadata"].get("labels") or {}
    if any(have.get(key) != value for key, value in wanted):
        return False
    wanted = [p.split("=", 1) for p in (fields or "").split(",") if p]
    return all(_field(obj, path) == value for path, value in wanted)


class FakeKube:
    """A reader over `objects`; `reset()` goes back to the objects it was built with."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self._initial = objects
        self.objects: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        self.objects = list(self._initial)

    def _in(self, ref: ResourceRef, obj: Mapping[str, Any], namespace: str | None) -> bool:
        if obj["kind"] != ref.kind:
            return False
        return (
            namespace is None or not ref.namespaced or obj["metadata"].get("namespace") == namespace
        )

    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        for obj in self.objects:
            meta = obj["metadata"]
            if (
                obj["kind"] == ref.kind
                and meta["name"] == name
                and (not ref.namespaced or meta.get("namespace") == namespace)
            ):
                return obj
        raise KubeNotFound(f"{ref.plural} {name} not found", status=404)

    def list(
        self,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        items = [
            obj
            for obj in self.objects
            if self._in(ref, obj, namespace) and _selected(obj, label_selector, field_selector)
        ]
        return ObjectList(items, "1")
