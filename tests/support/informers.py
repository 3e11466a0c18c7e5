"""Informer caches and the one pool object behind them, in memory, for reconciler tests.

- `FakeInformer`: a cache of fixed objects (`get`, `list`, `list_indexed`: by pool label
  unless told another index, as the informers are).
- `FakePoolStore`: one GangNodePool as the apiserver and the informer cache both hold it;
  `patch_status` merges a status patch and moves the resourceVersion.
- `LaggingCache`: a cache that answers with the object as it was when frozen, until told
  it caught up, as an informer lags the apiserver after a write.

Every answer is a copy, as from a real cache, so a reconciler cannot edit the test's
objects through it.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable, Mapping
from typing import Any

from provisioner.api import constants as c
from provisioner.kube.informer import label_index
from tests.support.stored_objects import apply_merge_patch


def _named(obj: Mapping[str, Any], namespace: str, name: str) -> bool:
    meta = obj["metadata"]
    return bool(meta["name"] == name and (meta.get("namespace") or "") == namespace)


_BY_POOL_LABEL = label_index(c.POOL_LABEL)  # the Node informer's index


class FakeInformer:
    """A synced cache of `objects`; `list_indexed` reads `index` (the pool label, as the Node
    informer's index does, unless told). `reset()` goes back to the objects it was built
    with."""

    def __init__(
        self,
        *objects: Mapping[str, Any],
        index: Callable[[dict[str, Any]], str | None] = _BY_POOL_LABEL,
    ) -> None:
        self._initial = [copy.deepcopy(dict(o)) for o in objects]
        self.index = index
        self.objects: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        self.objects = copy.deepcopy(self._initial)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = next((o for o in self.objects if _named(o, namespace, name)), None)
        return copy.deepcopy(found)

    def list(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.objects)

    def list_indexed(self, value: str) -> builtins.list[dict[str, Any]]:
        return [o for o in self.list() if self.index(o) == value]


class FakePoolStore:
    """The pool object `obj` as the apiserver and the informer cache both hold it."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self._initial = copy.deepcopy(dict(obj))
        self.obj: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        self.obj = copy.deepcopy(self._initial)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj) if _named(self.obj, namespace, name) else None

    def list(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.obj)]

    def list_indexed(self, value: str) -> builtins.list[dict[str, Any]]:
        return []  # a pool carries no pool label

    def changed(self) -> None:
        """The test changed `obj` as another writer would: it gets a new resourceVersion."""
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def patch_status(self, _ref: Any, _name: str, patch: Mapping[str, Any], **_: Any) -> Any:
        """A merge patch of the status (RFC 7386), as the apiserver applies one."""
        return self._merged({"status": patch["status"]})

    def patch(self, _ref: Any, _name: str, patch: Mapping[str, Any], **_: Any) -> Any:
        """A merge patch of everything but the status (metadata, spec)."""
        return self._merged({k: v for k, v in patch.items() if k != "status"})

    def _merged(self, patch: Mapping[str, Any]) -> Any:
        self.obj = apply_merge_patch(self.obj, patch)
        self.changed()
        return copy.deepcopy(self.obj)


class LaggingCache:
    """An informer of one object, read through `current` (the apiserver's copy, or None),
    or the copy `freeze` took until `catch_up`."""

    def __init__(self, current: Callable[[], Mapping[str, Any] | None]) -> None:
        self._current = current
        self.frozen: dict[str, Any] | None = None

    def reset(self) -> None:
        self.frozen = None

    def freeze(self) -> None:
        now = self._current()
        self.frozen = copy.deepcopy(dict(now)) if now is not None else None

    def catch_up(self) -> None:
        self.frozen = None

    def _held(self) -> dict[str, Any] | None:
        held = self.frozen if self.frozen is not None else self._current()
        return copy.deepcopy(dict(held)) if held is not None else None

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        held = self._held()
        return held if held is not None and _named(held, namespace, name) else None

    def list(self) -> list[dict[str, Any]]:
        held = self._held()
        return [held] if held is not None else []
