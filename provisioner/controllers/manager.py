"""The controller process's life cycle: informer caches, leadership, the reconcilers, the
stack executor, the pool reconciler's instance index, the reaper, and the health and
metrics endpoints.

The Manager builds none of these: the composition root (`provisioner.assembly`) makes them
from the settings and hands them over as `ControllerParts`; the Manager starts and stops
them. It serves /metrics from the controller's metrics (`ControllerMetrics`, on a registry
of its own, not prometheus_client's process-global one), so what a scrape shows is this
controller's work alone.

Called by `atomic-gang controller` (and by the integration tests, in-process or as a child
process). Every replica keeps its informer caches warm; only the Lease holder runs the
reconcilers, the stack executor and the reaper. Losing the Lease stops them at once, and
a stack operation already running is ended, not let finish: the stack driver's fence
closes and kills its CLI (``pulumi_driver.fence``). The fence closes on its own when the
renew deadline passes, before another replica may take the Lease, and the CLI's writes to
the state bucket pass only while it is open, so a leader paused and resumed writes nothing
to a stack afterwards. Every mutating EC2 call, the controller's and the provider host's,
is refused the same way once the fence has closed (``cloud.fencing``): a pass or a sweep
already running stops at its next write (`NotLeader`). Leading starts on a thread of its
own, so the elector's thread goes on renewing while the caches sync. Safety does not rest
on the Lease alone — every write is
preconditioned and every launch carries its ClientToken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import uvicorn
from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from provisioner.api.settings import Settings
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.controllers.ports import StackOps
from provisioner.controllers.reaper import Reaper
from provisioner.kube.workqueue import Controller

__all__ = ["WORKLOAD_WORKERS", "ControllerParts", "Elector", "InformerRun", "Manager"]

log = logging.getLogger(__name__)

# Workload passes at once. A warm wave is a burst of claims, each a Workload pass whose
# writes wait on the API server and Kueue's webhook, not on this process's CPU; each write
# is preconditioned on the version read, so two passes never overwrite each other.
WORKLOAD_WORKERS: Final = 5
# How long the leading thread waits for the caches before it logs which have not synced
# (and waits again).
SYNC_WAIT: Final = 60.0


class InformerRun(Protocol):
    """What the Manager does with an informer: run it, and ask whether its cache is full."""

    def start(self) -> None: ...

    def stop(self, timeout: float = ...) -> None: ...

    def has_synced(self) -> bool: ...

    def wait_for_sync(self, timeout: float | None = ...) -> bool: ...


class Elector(Protocol):
    """Leader election: calls the Manager's `start_leading` / `stop_leading`."""

    def start(self) -> None: ...

    def stop(self, *, release: bool = ...) -> None: ...


class Closing(Protocol):
    def close(self, timeout: float = ...) -> None: ...


@dataclass(frozen=True)
class ControllerParts:
    """Everything the Manager runs, built by the composition root."""

    informers: tuple[InformerRun, ...]
    # Started while leading, in this order; each stopped without draining on step-down.
    controllers: tuple[Controller, ...]
    executor: StackExecutor
    index: InstanceIndex
    reaper: Reaper
    stacks: StackOps
    recorder: Closing  # the Event recorder's writer, flushed on stop


@dataclass
class Manager:
    settings: Settings
    parts: ControllerParts
    identity: str
    # The one the stack port and every part report to.
    metrics: ControllerMetrics
    # None: leader election disabled, this replica leads from the start.
    elector: Elector | None = None
    on_lost_leadership: Callable[[], None] | None = None
    # More conditions /readyz waits for, by name (the webhook's: it serves a certificate the
    # API server trusts). Set before `start`.
    readiness_gates: dict[str, Callable[[], bool]] = field(default_factory=dict)
    _servers: list[uvicorn.Server] = field(default_factory=list)
    _leading: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # How long the leading thread waits for the caches between two log lines.
    sync_wait: float = SYNC_WAIT
    # Counts terms led: a waiter from an ended term starts nothing (`start_leading`).
    _term: int = 0

    def start(self, *, serve_http: bool = True) -> None:
        for informer in self.parts.informers:
            informer.start()
        if serve_http:
            self._serve_http()
        if self.elector is not None:
            self.elector.start()
        else:
            self.start_leading()

    def start_leading(self) -> None:
        """Lead: the reaper at once (it acts only while the caches it reads are trusted,
        see `Reaper`), the rest once every informer has synced, on a thread of this term's
        own. Called on the elector's thread, which must go on renewing the Lease (every
        `retry_period`, within `renew_deadline`) while the caches sync, so nothing here
        waits on them. Reconcilers read caches as the truth ("no such pool" creates one),
        so they never start on an unsynced cache; a term that ends before the caches sync
        starts nothing."""
        with self._lock:
            if self._leading.is_set():
                return
            self._term += 1
            term = self._term
            self.parts.reaper.start()
            self._leading.set()
            self.metrics.leader.set(1)
        threading.Thread(
            target=self._start_when_synced, args=(term,), name="leader-start", daemon=True
        ).start()

    def _unsynced(self) -> list[str]:
        return [str(getattr(i, "name", i)) for i in self.parts.informers if not i.has_synced()]

    def _start_when_synced(self, term: int) -> None:
        while True:
            synced = all(i.wait_for_sync(timeout=self.sync_wait) for i in self.parts.informers)
            with self._lock:
                if self._term != term or not self._leading.is_set():
                    return  # this term ended while waiting
                if synced:
                    self._start_cache_readers()
                    return
            log.error(
                "%s: leading, but informers %s have not synced (RBAC? apiserver?); "
                "reconcilers wait for them, the reaper acts on nothing until then",
                self.identity,
                self._unsynced(),
            )

    def _start_cache_readers(self) -> None:
        """Stack recovery, the instance index, the executor and the reconcilers (under
        `_lock`, with every informer synced)."""
        parts = self.parts
        log.info("%s: leading; recovering stacks, then starting reconcilers", self.identity)
        try:
            parts.stacks.recover()
        except Exception:  # a stack that cannot recover now is retried by its reconcile
            log.exception("stack recovery failed; continuing")
        # What it listed in an earlier term predates what the other leader did since.
        parts.index.forget_all()
        parts.index.start()
        parts.executor.start()
        for controller in parts.controllers:
            controller.start()

    def stop_leading(self) -> None:
        parts = self.parts
        with self._lock:
            if not self._leading.is_set():
                return
            log.warning("%s: lost leadership; stopping reconcilers", self.identity)
            self._leading.clear()
            self.metrics.leader.set(0)
            parts.executor.step_down()  # no stack operation starts from here on
            # The fence closes: a running one's CLI is killed and nothing more is written.
            parts.stacks.step_down()
            for controller in parts.controllers:
                controller.stop(drain=False, timeout=10)
            parts.executor.join(timeout=10)
            parts.reaper.stop()
            parts.index.stop()
        if self.on_lost_leadership is not None:
            self.on_lost_leadership()

    def is_leading(self) -> bool:
        return self._leading.is_set()

    def ready(self) -> bool:
        return all(i.has_synced() for i in self.parts.informers) and not self.unready_gates()

    def unready_gates(self) -> list[str]:
        return [name for name, gate in self.readiness_gates.items() if not gate()]

    def stop(self) -> None:
        if self.elector is not None:
            self.elector.stop(release=True)
        self.stop_leading()
        self.parts.recorder.close()
        for informer in self.parts.informers:
            informer.stop()
        for server in self._servers:
            server.should_exit = True

    # -- HTTP: /healthz /readyz /metrics --------------------------------------------------------
    def health_app(self) -> Starlette:
        async def healthz(_: Request) -> PlainTextResponse:
            return PlainTextResponse("ok")

        async def readyz(_: Request) -> PlainTextResponse:
            if self.ready():
                return PlainTextResponse("ok")
            waiting = self.unready_gates()
            if waiting:
                return PlainTextResponse(f"not ready: {', '.join(waiting)}", status_code=503)
            return PlainTextResponse("informer caches not synced", status_code=503)

        return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz)])

    def metrics_app(self) -> Starlette:
        return Starlette(
            routes=[Mount("/metrics", app=make_asgi_app(registry=self.metrics.registry))]
        )

    def _serve_http(self) -> None:
        # Probes come from the kubelet and scrapes from Prometheus: listen on all addresses.
        for name, app, port in (
            ("health-http", self.health_app(), self.settings.health_port),
            ("metrics-http", self.metrics_app(), self.settings.metrics_port),
        ):
            config = uvicorn.Config(
                app, host="0.0.0.0", port=port, log_config=None, access_log=False, lifespan="off"
            )
            server = uvicorn.Server(config)
            self._servers.append(server)
            threading.Thread(target=server.run, name=name, daemon=True).start()
