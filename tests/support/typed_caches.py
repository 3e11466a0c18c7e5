"""The typed caches the reconcilers read (`provisioner.kube.cache.TypedCache`), over the
raw fakes of `tests/support/informers.py`.

`typed(fake, parse, index)` hands a reconciler models of what the fake holds, parsed as the
composition root's caches parse them (once per resourceVersion). A fake delivers no
events; what it no longer holds the cache answers None for, as the fake does.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from provisioner.api.meta import KubeObject
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ObjectKey, key_of

__all__ = ["typed"]

T = TypeVar("T", bound=KubeObject)
Obj = dict[str, Any]


class RawFake(Protocol):
    def get(self, namespace: str, name: str) -> Obj | None: ...

    def list(self) -> list[Obj]: ...


class _AsInformer:
    """A raw fake with the informer calls it lacks: keys from its listing, no handlers."""

    def __init__(self, fake: RawFake, index: Callable[[Obj], str | None] | None) -> None:
        self._fake = fake
        self._index = index

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._fake.get(namespace, name)

    def list(self) -> list[Obj]:
        return self._fake.list()

    def list_indexed(self, value: str) -> builtins.list[Obj]:
        if self._index is not None:
            return [obj for obj in self._fake.list() if self._index(obj) == value]
        indexed: Callable[[str], builtins.list[Obj]] | None = getattr(
            self._fake, "list_indexed", None
        )
        if indexed is None:
            raise RuntimeError(f"{type(self._fake).__name__} keeps no index")
        return indexed(value)

    def list_keys(self) -> builtins.list[ObjectKey]:
        return [key_of(obj) for obj in self._fake.list()]

    def add_handlers(
        self,
        on_add: Callable[[Obj], None] | None = None,
        on_update: Callable[[Obj, Obj], None] | None = None,
        on_delete: Callable[[Obj], None] | None = None,
    ) -> None:
        """A fake changes under the test's hand: no events to deliver."""


def typed(
    fake: RawFake, parse: Callable[[Obj], T], index: Callable[[Obj], str | None] | None = None
) -> TypedCache[T]:
    """With `index`: `list_indexed` filters the fake's listing by it, as the informer built
    with that index answers; without, the fake's own `list_indexed` answers."""
    return TypedCache(_AsInformer(fake, index), parse)
