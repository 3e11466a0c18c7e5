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
reconcilers, the stack executor and the reaper. Losing the Lease stops them at once (a
stack operation already running finishes, breaking no lock); safety does not rest on the
Lease alone — every write is preconditioned and every launch carries its ClientToken.
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
from provisioner.controllers.ports import StackOps
from provisioner.controllers.reaper import Reaper
from provisioner.controllers.stack_executor import StackExecutor
from provisioner.kube.workqueue import Controller

__all__ = ["WORKLOAD_WORKERS", "ControllerParts", "Elector", "InformerRun", "Manager"]

log = logging.getLogger(__name__)

# Workload passes at once. A warm wave is a burst of claims, each a Workload pass whose
# writes wait on the API server and Kueue's webhook, not on this process's CPU; each write
# is preconditioned on the version read, so two passes never overwrite each other.
WORKLOAD_WORKERS: Final = 5


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
    _servers: list[uvicorn.Server] = field(default_factory=list)
    _leading: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

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
        parts = self.parts
        with self._lock:
            if self._leading.is_set():
                return
            for informer in parts.informers:
                informer.wait_for_sync(timeout=60)
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
            parts.reaper.start()
            self._leading.set()

    def stop_leading(self) -> None:
        parts = self.parts
        with self._lock:
            if not self._leading.is_set():
                return
            log.warning("%s: lost leadership; stopping reconcilers", self.identity)
            self._leading.clear()
            parts.executor.step_down()  # no stack operation starts from here on
            parts.stacks.step_down()  # one still running breaks no lock (the new leader's)
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
        return all(i.has_synced() for i in self.parts.informers)

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
