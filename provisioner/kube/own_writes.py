"""`OwnWrites`: which objects a reconciler's informer cache still shows from before its own
last write, so a pass does not plan from them.

A write's watch event queues the object again, but other events (a mapped object's, another
controller's write) can queue it first, while the cache still holds the version the write
replaced. A pass planned from that version redoes what the write did: at best a conflict
for nothing (each one a request the API server validates, admits and refuses), at worst a
repeated side effect. The reconciler notes each version it wrote over (`wrote`); a pass that
finds the cache still holding one (`cache_behind`) waits for the write's own event instead.

resourceVersions are compared for equality only, never ordered. An informer's cache never
goes back, so once it holds any other version of the object, it holds our write or newer,
whoever wrote since.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from provisioner.api.meta import KubeObject

__all__ = ["WAIT_FOR_OWN_WRITE_SECONDS", "OwnWrites"]

# A pass that waits for its own write's watch event looks again after this long should the
# event be lost; the event normally comes within milliseconds and queues the object itself.
WAIT_FOR_OWN_WRITE_SECONDS = 2.0


def _version(obj: KubeObject) -> str:
    return obj.metadata.resource_version or ""


class OwnWrites:
    """Per object key, the resourceVersions this reconciler wrote over that the cache has not
    yet moved past. Thread-safe: workers of different keys share one."""

    def __init__(self) -> None:
        self._replaced: dict[Hashable, set[str]] = {}
        self._lock = threading.Lock()

    def wrote(self, key: Hashable, read: KubeObject, written: KubeObject) -> None:
        """`read` (the object as the cache held it) was replaced by `written`."""
        old, new = _version(read), _version(written)
        if old and old != new:
            with self._lock:
                self._replaced.setdefault(key, set()).add(old)

    def cache_behind(self, key: Hashable, cached: KubeObject | None) -> bool:
        """Whether `cached` is a version of `key` this reconciler wrote over; None (the cache
        has no such object) forgets the key."""
        if cached is None:
            self.forget(key)
            return False
        with self._lock:
            replaced = self._replaced.get(key)
            if not replaced:
                return False
            if _version(cached) in replaced:
                return True
            # The cache moved past every version we replaced: nothing to wait for any more.
            del self._replaced[key]
            return False

    def forget(self, key: Hashable) -> None:
        """The object is gone: nothing of it is waited for."""
        with self._lock:
            self._replaced.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._replaced)
