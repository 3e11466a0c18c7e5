"""List+watch informers: an in-memory cache of one resource, kept current on a thread.

Each controller builds informers for what it watches (GangNodePools and Nodes, Workloads,
AdmissionChecks) from `KubeClient.list_watch(...)`, registers handlers (usually through
`workqueue.Controller.watch`, which turns events into keys) and starts them before its
workers. Reads during reconcile come from `get`/`list` instead of the apiserver.

The loop is the reflector's: list, then watch from the list's resourceVersion with
bookmarks; each event (and bookmark) advances the resourceVersion, so an ended watch is
resumed where it stopped. A 410 (raised, or an ERROR event) means that version is gone:
re-list and diff against the cache, synthesising the adds, updates and deletes the watch
missed. Any other failure (apiserver restarting, connection refused) backs off and
re-watches from the same version. Handlers run on the informer's thread, one at a time;
they should be quick (enqueue a key) and must treat the objects as read-only.

Health (`problem`): a synced cache can still be blind. A list or watch refused (401/403:
RBAC taken away) or failing (5xx, no connection) leaves the cache as it was, silently
missing every change since; so does a loop that has not completed a list or watch for
`stale_after` seconds. Whoever acts on what the cache does NOT hold (the reaper: "no such
pool") asks `problem()` first and acts only on None.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from provisioner.kube.client import ObjectList
from provisioner.kube.errors import KubeGone, from_status
from provisioner.kube.resources import ObjectKey, key_of

__all__ = ["Informer", "ListWatch", "WatchSource", "label_index"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# Spelled once here: `Informer.list` shadows `list` inside the class.
Objects = list[Obj]
Keys = list[ObjectKey]
OnAdd = Callable[[Obj], None]
OnUpdate = Callable[[Obj, Obj], None]
OnDelete = Callable[[Obj], None]


class WatchSource(Protocol):
    """A running watch: yields `{"type", "object"}` events; `stop` may come from any thread."""

    def __iter__(self) -> Iterator[Obj]: ...

    def stop(self) -> None: ...


class ListWatch(Protocol):
    """How an informer reads its resource (`KubeClient.list_watch` builds the real one)."""

    def list(self) -> ObjectList: ...

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchSource: ...


@dataclass(frozen=True)
class _Handlers:
    on_add: OnAdd | None
    on_update: OnUpdate | None
    on_delete: OnDelete | None


def _trimmed(obj: Obj) -> Obj:
    """The object as cached: without `metadata.managedFields`, which no reader here uses
    and which is often the largest part of an object (one entry per writer; Kueue and the
    apiserver's status writers each add theirs), as controller-runtime's
    `TransformStripManagedFields` trims it. A write built from a cached body leaves the
    field out, which the apiserver takes as "keep the object's own"."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def label_index(label: str) -> Callable[[Obj], str | None]:
    """An `Informer` index by the value of one label (a Node's pool)."""

    def value_of(obj: Obj) -> str | None:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return None if value is None else str(value)

    return value_of


class Informer:
    """Caches one resource (one selector) and calls handlers as it changes."""

    def __init__(
        self,
        source: ListWatch,
        *,
        name: str,
        resync_period: float | None = None,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        index: Callable[[Obj], str | None] | None = None,
        keep: Callable[[Obj], Obj] | None = None,
        stale_after: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._source = source
        self._resync_period = resync_period
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._lock = threading.Lock()  # cache, resourceVersion, current stream
        self._dispatch_lock = threading.RLock()  # one handler call at a time
        self._cache: dict[ObjectKey, Obj] = {}
        # With `index` (a function of an object: its value, or None): the cached objects by
        # that value, kept with the cache, so a reader of one value's objects (a pool's
        # Nodes, the pools one Workload claims) does not walk all of them.
        self._index_of = index
        self._index: dict[str, dict[ObjectKey, Obj]] = {}
        # With `keep` (of a body, what of it to cache: `read_by` keeps what a model reads):
        # a cache that holds whole Jobs or Nodes of which one reads a few fields grows with
        # what it never reads (a Node's images and addresses, a Job's pod template).
        self._keep = keep
        self._resource_version = ""
        self._stream: WatchSource | None = None
        self._handlers: list[_Handlers] = []
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.relists = 0  # how many times the cache was rebuilt from a list (tests, metrics)
        # Health: the last list/watch failure (None once one succeeds again) and when the
        # loop last completed one. A quiet watch ends cleanly every `watch_timeout`, so two
        # of those plus the longest backoff is the longest a healthy loop goes without one.
        self._monotonic = monotonic
        self._stale_after = (
            stale_after if stale_after is not None else 2.0 * watch_timeout + backoff_max
        )
        self._failure: Exception | None = None
        self._last_success: float | None = None

    # -- public -----------------------------------------------------------------------------
    def add_handlers(
        self,
        on_add: OnAdd | None = None,
        on_update: OnUpdate | None = None,
        on_delete: OnDelete | None = None,
    ) -> None:
        """Register callbacks; a late registration first gets an add for every cached object."""
        handlers = _Handlers(on_add, on_update, on_delete)
        with self._dispatch_lock:
            self._handlers.append(handlers)
            if self._synced.is_set() and on_add is not None:
                for obj in self.list():
                    self._call(on_add, obj)

    def start(self) -> None:
        if self._threads:
            raise RuntimeError(f"informer {self.name} already started")
        self._threads.append(
            threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        )
        if self._resync_period:
            self._threads.append(
                threading.Thread(
                    target=self._resync_loop, name=f"informer-{self.name}-resync", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.stop()
        for thread in self._threads:
            thread.join(timeout)

    def has_synced(self) -> bool:
        """True once the first list has been cached and its adds delivered."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def problem(self) -> str | None:
        """Why this cache cannot be trusted to be complete now, or None when it can: not
        synced yet, the last list/watch failed (refused, server error, no connection), or
        no list/watch completed for `stale_after` seconds."""
        if not self._synced.is_set():
            return f"informer {self.name} has not synced"
        with self._lock:
            failure, last = self._failure, self._last_success
        if failure is not None:
            kind = type(failure).__name__
            return f"informer {self.name}: last list/watch failed: {kind}: {failure}"
        if last is None or self._monotonic() - last > self._stale_after:
            return f"informer {self.name}: no list/watch completed for {self._stale_after:g}s"
        return None

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._cache.get(ObjectKey(namespace, name))

    def list(self) -> Objects:
        with self._lock:
            return list(self._cache.values())

    def list_indexed(self, value: str) -> Objects:
        """The cached objects whose `index` is `value`."""
        if self._index_of is None:
            raise RuntimeError(f"informer {self.name} keeps no index")
        with self._lock:
            return list(self._index.get(value, {}).values())

    def list_keys(self) -> Keys:
        with self._lock:
            return list(self._cache)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    def resync(self) -> None:
        """Deliver every cached object as an update to itself (periodic re-reconcile)."""
        with self._dispatch_lock:
            for obj in self.list():
                for handlers in self._handlers:
                    if handlers.on_update is not None:
                        self._call(handlers.on_update, obj, obj)

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        delay = self._backoff_initial
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                    self._succeeded()
                started = time.monotonic()
                received = self._watch_once()
                if received or time.monotonic() - started > 1.0:
                    delay = self._backoff_initial
                    self._succeeded()
                    continue
                # A watch that ends at once with nothing in it is a failing server.
                raise ConnectionError("watch closed immediately")
            except KubeGone as gone:
                log.info("informer %s: resourceVersion expired (%s); re-listing", self.name, gone)
                # An expired watch re-lists at once; an expired list (paging token) backs off.
                if not need_list:
                    need_list = True
                    continue
                error: Exception = gone
            except Exception as err:
                error = err
            with self._lock:
                self._failure = error
            if self._stopping.is_set():
                break
            log.warning(
                "informer %s: %s: %s; retrying in %.1fs",
                self.name,
                type(error).__name__,
                error,
                delay,
            )
            self._stopping.wait(delay)
            delay = min(delay * 2, self._backoff_max)

    def _succeeded(self) -> None:
        with self._lock:
            self._failure = None
            self._last_success = self._monotonic()

    def _relist(self) -> None:
        listing = self._source.list()
        fresh = {key_of(kept): kept for kept in map(self._kept, listing.items)}
        with self._dispatch_lock:
            with self._lock:
                old, self._cache = self._cache, fresh
                self._index = {}
                for key, obj in fresh.items():
                    self._index_add(key, obj)
                self._resource_version = listing.resource_version
            for key, obj in fresh.items():
                previous = old.get(key)
                if previous is None:
                    self._dispatch("add", obj)
                elif _rv(previous) != _rv(obj):
                    self._dispatch("update", obj, previous)
            for key, obj in old.items():
                if key not in fresh:
                    self._dispatch("delete", obj)
            self.relists += 1
        self._synced.set()

    def _watch_once(self) -> bool:
        stream = self._source.watch(self.resource_version, self._watch_timeout)
        with self._lock:
            self._stream = stream
        received = False
        try:
            if self._stopping.is_set():
                return False
            for event in stream:
                if self._stopping.is_set():
                    break
                self._apply(event)
                received = True
        finally:
            with self._lock:
                self._stream = None
            stream.stop()
        return received

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj: Obj = event.get("object") or {}
        if kind == "ERROR":
            raise from_status(obj)
        if kind == "BOOKMARK":
            with self._lock:
                self._resource_version = _rv(obj) or self._resource_version
            return
        obj = self._kept(obj)
        key = key_of(obj)
        with self._dispatch_lock:
            with self._lock:
                previous = self._cache.get(key)
                if previous is not None:
                    self._index_remove(key, previous)
                if kind == "DELETED":
                    self._cache.pop(key, None)
                else:
                    self._cache[key] = obj
                    self._index_add(key, obj)
                self._resource_version = _rv(obj) or self._resource_version
            if kind == "DELETED":
                if previous is not None:
                    self._dispatch("delete", obj)
            elif previous is None:
                self._dispatch("add", obj)
            else:
                self._dispatch("update", obj, previous)

    def _kept(self, obj: Obj) -> Obj:
        trimmed = _trimmed(obj)
        return trimmed if self._keep is None else self._keep(trimmed)

    # -- the index, under self._lock ---------------------------------------------------------------
    def _index_value(self, obj: Obj) -> str | None:
        return None if self._index_of is None else self._index_of(obj)

    def _index_add(self, key: ObjectKey, obj: Obj) -> None:
        value = self._index_value(obj)
        if value is not None:
            self._index.setdefault(value, {})[key] = obj

    def _index_remove(self, key: ObjectKey, obj: Obj) -> None:
        value = self._index_value(obj)
        if value is None:
            return
        members = self._index.get(value)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._index[value]

    def _resync_loop(self) -> None:
        assert self._resync_period
        while not self._stopping.wait(self._resync_period):
            if self._synced.is_set():
                self.resync()

    # -- handlers ---------------------------------------------------------------------------
    def _dispatch(self, what: str, obj: Obj, previous: Obj | None = None) -> None:
        for handlers in self._handlers:
            if what == "add" and handlers.on_add is not None:
                self._call(handlers.on_add, obj)
            elif what == "update" and handlers.on_update is not None:
                self._call(handlers.on_update, previous or obj, obj)
            elif what == "delete" and handlers.on_delete is not None:
                self._call(handlers.on_delete, obj)

    def _call(self, handler: Callable[..., None], *args: Obj) -> None:
        try:
            handler(*args)
        except Exception:
            # A broken handler must not stop the cache from following the apiserver.
            log.exception("informer %s: handler %r failed", self.name, handler)
