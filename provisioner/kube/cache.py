"""`TypedCache`: an informer's cache as the controllers read it, in typed models.

The composition root (`provisioner.assembly`) builds one per informer a reconciler reads,
with the model's parser (`Workload.from_dict`, `GangNodePool.from_dict`, ...); reconcilers
get and list models and never see the API bodies. Each object is parsed once per
resourceVersion: a model is kept with the version it was parsed from, and reused until the
informer holds another version (a pass over 1,000 Workloads does not parse 1,000 bodies
again). A deleted object's model is dropped with it. With `models_kept`, only that many
models are kept, the most recently read: for a resource read one object at a time and far
larger than what is being worked on (a cluster's Workloads, most of them other queues' or
long finished), whose models would otherwise double the informer's memory.

Called from the work queue's workers and, through `to_keys`, from the informer's thread
(event mappings): thread-safe. A body that does not parse raises the parser's error to the
caller, as parsing it in the reconciler did.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from provisioner.api.meta import KubeObject
from provisioner.kube.resources import ObjectKey, key_of

__all__ = ["Parse", "RawCache", "TypedCache", "read_by"]

Obj = dict[str, Any]
T = TypeVar("T", bound=KubeObject)
Parse = Callable[[Obj], T]
# Spelled once here: `list` methods shadow `list` inside the classes.
Objs = list[Obj]
Keys = list[ObjectKey]
Models = list[T]


class RawCache(Protocol):
    """What a `TypedCache` reads of an `Informer` (tests hand a fake)."""

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def list(self) -> Objs: ...

    def list_indexed(self, value: str) -> Objs: ...

    def list_keys(self) -> Keys: ...

    def add_handlers(
        self,
        on_add: Callable[[Obj], None] | None = ...,
        on_update: Callable[[Obj, Obj], None] | None = ...,
        on_delete: Callable[[Obj], None] | None = ...,
    ) -> None: ...


def read_by(parse: Parse[T]) -> Callable[[Obj], Obj]:
    """What an informer keeps of a body (`Informer(keep=...)`): only the fields the model
    `parse` reads, as it read them, so the cache holds what its readers look at and the
    model parsed from it is the same. A body the model cannot read is kept whole: its
    reader gets the parse error, as it would have."""

    def keep(body: Obj) -> Obj:
        try:
            return parse(body).fields_read()
        except Exception:  # whatever it is, the reader meets it, not the informer
            # Raised here, it would stop the informer on this object (its loop retries the
            # same list or event); a validator's TypeError is not a ValidationError.
            return body

    return keep


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class TypedCache(Generic[T]):
    """The objects of one informer as models of type T, each parsed once per version."""

    def __init__(
        self, informer: RawCache, parse: Parse[T], *, models_kept: int | None = None
    ) -> None:
        self._informer = informer
        self._parse = parse
        self._models_kept = models_kept
        self._lock = threading.Lock()
        # In the order last read (the oldest first), for `models_kept`.
        self._parsed: OrderedDict[ObjectKey, tuple[str, T]] = OrderedDict()
        informer.add_handlers(on_delete=self._drop)

    def get(self, namespace: str, name: str) -> T | None:
        raw = self._informer.get(namespace, name)
        return None if raw is None else self._model(raw)

    def list(self) -> Models[T]:
        return [self._model(raw) for raw in self._informer.list()]

    def list_indexed(self, value: str) -> Models[T]:
        """The objects whose value in the informer's `index` is `value`."""
        return [self._model(raw) for raw in self._informer.list_indexed(value)]

    def list_keys(self) -> Keys:
        return self._informer.list_keys()

    def to_keys(
        self, mapping: Callable[[T], Iterable[ObjectKey]]
    ) -> Callable[[Obj], Iterable[ObjectKey]]:
        """`mapping` of models as `Controller.watch` takes it: of the informer's bodies."""
        return lambda raw: mapping(self._model(raw))

    def __len__(self) -> int:
        """How many parsed models are kept (tests)."""
        with self._lock:
            return len(self._parsed)

    def _model(self, raw: Obj) -> T:
        key, version = key_of(raw), _version(raw)
        with self._lock:
            kept = self._parsed.get(key)
            if kept is not None and version and kept[0] == version:
                self._parsed.move_to_end(key)
                return kept[1]
        model = self._parse(raw)
        if version:  # a body without one (a test's) is parsed each time
            with self._lock:
                # Not kept for an object deleted since it was read: its deletion's `_drop`
                # has run, or waits for this lock and drops it after.
                if self._informer.get(key.namespace, key.name) is not None:
                    self._parsed[key] = (version, model)
                    self._parsed.move_to_end(key)
                    while self._models_kept is not None and len(self._parsed) > self._models_kept:
                        self._parsed.popitem(last=False)
        return model

    def _drop(self, raw: Obj) -> None:
        with self._lock:
            self._parsed.pop(key_of(raw), None)
