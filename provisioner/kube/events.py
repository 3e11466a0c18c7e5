"""`EventRecorder`: Kubernetes Events about our objects, for `kubectl describe`.

Reconcilers call `normal`/`warning` with the object they act on (`InvolvedObject.of` its
resource and the metadata of the model read) and a reason constant. Events are `core/v1`
so they show under the object with `count` and
`lastTimestamp`: the same (object, type, reason, message) within the aggregation window
increments the existing Event instead of creating another, which keeps a retry loop from
flooding etcd. Recording is best effort and never raises into the reconcile: a failure is
logged and the reconcile carries on. Pass a client with a short timeout.

With ``background=True`` (the controller's recorder) an Event is handed to one writer thread
and `record` returns at once: a reconcile pass never waits on an Event's round trip to the API
server. The queue is bounded; when it is full an Event is dropped and logged, never waited for.
`close` writes what is queued before the process stops.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from provisioner.api.clock import SYSTEM_CLOCK, Clock
from provisioner.api.constants import EVENT_NORMAL, EVENT_WARNING, FIELD_MANAGER
from provisioner.api.meta import ObjectMeta
from provisioner.kube.resources import CORE_EVENTS, ResourceRef

__all__ = ["NORMAL", "WARNING", "EventRecorder", "EventWriter", "InvolvedObject"]

log = logging.getLogger(__name__)

NORMAL: Final = EVENT_NORMAL
WARNING: Final = EVENT_WARNING
_MESSAGE_LIMIT: Final = 1024
_TIME = "%Y-%m-%dT%H:%M:%SZ"


class EventWriter(Protocol):
    """The `KubeClient` calls the recorder makes."""

    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = ...,
        resource_version: str,
        field_manager: str | None = ...,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class InvolvedObject:
    """The object an Event is about, as its `involvedObject` names it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None

    @classmethod
    def of(cls, ref: ResourceRef, meta: ObjectMeta) -> InvolvedObject:
        """The object of resource `ref` with that metadata (as read, or as sent)."""
        return cls(
            ref.api_version, ref.kind, meta.name, meta.namespace, meta.uid, meta.resource_version
        )

    def to_dict(self) -> dict[str, Any]:
        fields = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        }
        return {key: value for key, value in fields.items() if value}


@dataclass(frozen=True)
class _Pending:
    involved: dict[str, Any]
    type: str
    reason: str
    message: str


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    resource_version: str
    last_seen: float


class EventRecorder:
    """Creates (or bumps) core/v1 Events; thread-safe; never raises."""

    def __init__(
        self,
        client: EventWriter,
        *,
        component: str = FIELD_MANAGER,
        instance: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        window: float = 600.0,
        max_tracked: int = 4096,
        background: bool = False,
        max_pending: int = 1024,
    ) -> None:
        self._client = client
        self._component = component
        self._instance = instance or socket.gethostname()
        self._clock = clock
        self._window = window
        self._max_tracked = max_tracked
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: queue.Queue[_Pending | None] | None = (
            queue.Queue(max_pending) if background else None
        )
        self._writer: threading.Thread | None = None
        # Apart from `_lock`, which a write holds over its API call.
        self._writer_lock = threading.Lock()

    def normal(self, obj: InvolvedObject, reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: InvolvedObject, reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)

    def record(self, obj: InvolvedObject, event_type: str, reason: str, message: str) -> None:
        try:
            # Taken now: the object as the reconcile saw it, whenever the Event is written.
            event = _Pending(_involved(obj), event_type, reason, message[:_MESSAGE_LIMIT])
        except ValueError as err:
            log.warning("event %s %s not recorded: %s", event_type, reason, err)
            return
        if self._pending is None:
            self._write(event)
            return
        self._start_writer()
        try:
            self._pending.put_nowait(event)
        except queue.Full:
            log.warning(
                "event %s %s on %s %s dropped: %d Events already wait to be written",
                event_type,
                reason,
                event.involved["kind"],
                event.involved["name"],
                self._pending.maxsize,
            )

    def close(self, timeout: float = 5.0) -> None:
        """Write the queued Events (for at most `timeout` seconds) and stop the writer."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
        if self._pending is None or writer is None:
            return
        self._pending.put(None)
        writer.join(timeout)

    def _start_writer(self) -> None:
        if self._writer is not None:
            return
        with self._writer_lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_queued, name="event-writer", daemon=True
                )
                self._writer.start()

    def _write_queued(self) -> None:
        assert self._pending is not None
        while (event := self._pending.get()) is not None:
            self._write(event)

    def _write(self, event: _Pending) -> None:
        try:
            with self._lock:
                self._record(event)
        except Exception as err:
            log.warning(
                "event %s %s on %s %s not recorded: %s",
                event.type,
                event.reason,
                event.involved["kind"],
                event.involved["name"],
                err,
            )

    def _record(self, event: _Pending) -> None:
        involved, event_type, reason, message = (
            event.involved,
            event.type,
            event.reason,
            event.message,
        )
        identity = involved.get("uid") or f"{involved['kind']}/{involved.get('namespace')}"
        key = (identity, involved["name"], event_type, reason, message)
        now = self._clock.monotonic()
        stamp = self._clock.wall().strftime(_TIME)
        seen = self._seen.get(key)
        if seen is not None and now - seen.last_seen <= self._window:
            try:
                bumped = self._client.patch(
                    CORE_EVENTS,
                    seen.name,
                    {"count": seen.count + 1, "lastTimestamp": stamp},
                    namespace=seen.namespace,
                    resource_version=seen.resource_version,
                )
            except Exception as err:
                # Gone, or changed by someone else: start a fresh Event rather than fight.
                log.debug("event %s could not be bumped (%s); creating anew", seen.name, err)
            else:
                seen.count += 1
                seen.resource_version = _rv(bumped)
                seen.last_seen = now
                self._seen.move_to_end(key)
                return
        namespace = involved.get("namespace") or "default"  # cluster-scoped objects
        body = {
            "metadata": {
                "name": f"{involved['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self._component, "host": self._instance},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
        }
        created = self._client.create(CORE_EVENTS, body)
        self._seen[key] = _Seen(created["metadata"]["name"], namespace, 1, _rv(created), now)
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_tracked:
            self._seen.popitem(last=False)


def _involved(obj: InvolvedObject) -> dict[str, Any]:
    if not obj.kind or not obj.name:
        raise ValueError("an event needs an object with kind and metadata.name")
    return obj.to_dict()


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
