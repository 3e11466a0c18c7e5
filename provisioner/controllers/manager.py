"""The controller process: informers, the three reconcilers, the stack executor, the
pool reconciler's instance index, the reaper, leader election, and the health and metrics
endpoints.

The Manager owns the controller's metrics (`ControllerMetrics`, on a registry of its own,
not prometheus_client's process-global one): it hands them to every part it builds and
serves /metrics from them, so what a scrape shows is this controller's work alone.

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
from datetime import UTC, datetime
from typing import Any, Final

import uvicorn
from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from provisioner.api import constants as c
from provisioner.api.clock import SYSTEM_CLOCK
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import GangOwner
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.controllers.admissioncheck import AdmissionCheckReconciler
from provisioner.controllers.gangnodepool import GangNodePoolReconciler
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.metrics import ControllerMetrics, QueueMetrics
from provisioner.controllers.pool_deps import PoolReconcilerDeps
from provisioner.controllers.ports import EngineOps, StackOps
from provisioner.controllers.reaper import Reaper, pool_facts
from provisioner.controllers.stack_executor import StackExecutor
from provisioner.controllers.workload import WorkloadReconciler
from provisioner.kube.cache import TypedCache
from provisioner.kube.client import KubeClient
from provisioner.kube.events import EventRecorder
from provisioner.kube.informer import Informer
from provisioner.kube.leader import LeaderElector, LeaseLock, default_identity
from provisioner.kube.resources import (
    ADMISSION_CHECKS,
    GANG_NODE_POOLS,
    JOBS,
    NODES,
    WORKLOADS,
    ObjectKey,
)
from provisioner.kube.workqueue import Controller

log = logging.getLogger(__name__)

# Workload passes at once. A warm wave is a burst of claims, each a Workload pass whose
# writes wait on the API server and Kueue's webhook, not on this process's CPU; each write
# is preconditioned on the version read, so two passes never overwrite each other.
WORKLOAD_WORKERS: Final = 5


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Manager:
    settings: Settings
    kube: KubeClient
    engine: EngineOps
    stacks: StackOps
    identity: str = field(default_factory=default_identity)
    now: Callable[[], datetime] = utc_now
    on_lost_leadership: Callable[[], None] | None = None
    # The composition root passes the one the stack port reports to as well.
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)
    _informers: dict[str, Informer] = field(default_factory=dict)
    _controllers: list[Controller] = field(default_factory=list)
    _reaper: Reaper | None = None
    _executor: StackExecutor | None = None
    _index: InstanceIndex | None = None
    _recorder: EventRecorder | None = None
    _elector: LeaderElector | None = None
    _servers: list[uvicorn.Server] = field(default_factory=list)
    _leading: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- wiring ---------------------------------------------------------------------------
    def _informer(
        self,
        name: str,
        ref: Any,
        label_selector: str | None = None,
        index_label: str | None = None,
    ) -> Informer:
        informer = Informer(
            self.kube.list_watch(ref, label_selector=label_selector),
            name=name,
            index_label=index_label,
        )
        self._informers[name] = informer
        return informer

    def start(self, *, serve_http: bool = True) -> None:
        workloads = self._informer("workloads", WORKLOADS)
        pools = self._informer("gangnodepools", GANG_NODE_POOLS)
        checks = self._informer("admissionchecks", ADMISSION_CHECKS)
        # Indexed by pool: each pool pass reads its own Nodes, not every pool's.
        nodes = self._informer(
            "nodes", NODES, label_selector=c.POOL_LABEL, index_label=c.POOL_LABEL
        )
        # Only the Jobs of gang pools: the warm path reads owner Jobs from here, not by GET.
        jobs = self._informer("jobs", JOBS, label_selector=c.POOL_LABEL)
        for informer in self._informers.values():
            informer.start()
        # Events are written by a thread of their own: no pass waits on one.
        recorder = EventRecorder(self.kube.with_timeout(5), instance=self.identity, background=True)
        self._recorder = recorder

        typed_pools = TypedCache(pools, GangNodePool.from_dict)
        typed_checks = TypedCache(checks, AdmissionCheck.from_dict)
        check_reconciler = AdmissionCheckReconciler(
            self.kube, typed_checks, self.settings.controller_name, self.now
        )
        workload_reconciler = WorkloadReconciler(
            self.kube,
            TypedCache(workloads, Workload.from_dict),
            typed_pools,
            typed_checks,
            TypedCache(jobs, GangOwner.from_dict),
            self.settings,
            recorder,
            self.now,
        )
        # A finished stack operation queues its pool again (pool_ctl exists by then: the
        # executor starts with the reconcilers).
        executor = StackExecutor(
            self.settings.stack_operations.workers,
            on_finished=lambda pool: pool_ctl.enqueue(ObjectKey("", pool)),
            metrics=self.metrics,
        )
        self._executor = executor
        # One listing of EC2 shared by every settled pool, instead of one per pool per pass.
        self._index = index = InstanceIndex(
            self.engine,
            self.settings.cluster_name,
            self.settings.instance_index_refresh_seconds,
            SYSTEM_CLOCK,
            self.metrics,
        )
        pool_reconciler = GangNodePoolReconciler(
            PoolReconcilerDeps(
                kube=self.kube,
                pools=pools,
                nodes=nodes,
                engine=self.engine,
                index=index,
                stacks=self.stacks,
                executor=executor,
                settings=self.settings,
                recorder=recorder,
                now=self.now,
                metrics=self.metrics,
            )
        )
        check_ctl = Controller(
            "admissioncheck",
            check_reconciler.reconcile,
            observer=QueueMetrics(self.metrics, "admissioncheck"),
        )
        check_ctl.watch(checks)
        workload_ctl = Controller(
            "workload",
            workload_reconciler.reconcile,
            max_concurrent=WORKLOAD_WORKERS,
            observer=QueueMetrics(self.metrics, "workload"),
        )
        workload_ctl.watch(workloads)
        workload_ctl.watch(pools, typed_pools.to_keys(workload_reconciler.keys_for_pool))
        pool_ctl = Controller(
            "gangnodepool",
            pool_reconciler.reconcile,
            max_concurrent=self.settings.max_concurrent_pool_reconciles,
            observer=QueueMetrics(self.metrics, "gangnodepool"),
        )
        pool_ctl.watch(pools)
        pool_ctl.watch(nodes, pool_reconciler.keys_for_node)
        # A Workload whose check becomes ours (or Active) must be looked at again.
        workload_ctl.watch(checks, lambda _check: [ObjectKey(*k) for k in workloads.list_keys()])
        self._controllers = [check_ctl, workload_ctl, pool_ctl]

        self._reaper = Reaper(
            self.engine,
            self.settings.cluster_name,
            lambda: pool_facts(typed_pools.list()),
            self.settings.reap_interval_seconds,
            self.now,
            self.metrics,
            forget=index.forget,
        )
        if serve_http:
            self._serve_http()
        election = self.settings.leader_election
        if election.enabled:
            self._elector = LeaderElector(
                LeaseLock(self.kube.with_timeout(5), election.lease_namespace, election.lease_name),
                self.identity,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
                lease_duration=election.lease_duration.total_seconds(),
                renew_deadline=election.renew_deadline.total_seconds(),
                retry_period=election.retry_period.total_seconds(),
            )
            self._elector.start()
        else:
            self._start_leading()

    def _start_leading(self) -> None:
        with self._lock:
            if self._leading.is_set():
                return
            for informer in self._informers.values():
                informer.wait_for_sync(timeout=60)
            log.info("%s: leading; recovering stacks, then starting reconcilers", self.identity)
            try:
                self.stacks.recover()
            except Exception:  # a stack that cannot recover now is retried by its reconcile
                log.exception("stack recovery failed; continuing")
            if self._index is not None:
                # What it listed in an earlier term predates what the other leader did since.
                self._index.forget_all()
                self._index.start()
            if self._executor is not None:
                self._executor.start()
            for controller in self._controllers:
                controller.start()
            if self._reaper is not None:
                self._reaper.start()
            self._leading.set()

    def _stop_leading(self) -> None:
        with self._lock:
            if not self._leading.is_set():
                return
            log.warning("%s: lost leadership; stopping reconcilers", self.identity)
            self._leading.clear()
            if self._executor is not None:
                self._executor.step_down()  # no stack operation starts from here on
            self.stacks.step_down()  # one still running breaks no lock (the new leader's)
            for controller in self._controllers:
                controller.stop(drain=False, timeout=10)
            if self._executor is not None:
                self._executor.join(timeout=10)
            if self._reaper is not None:
                self._reaper.stop()
            if self._index is not None:
                self._index.stop()
        if self.on_lost_leadership is not None:
            self.on_lost_leadership()

    def is_leading(self) -> bool:
        return self._leading.is_set()

    def ready(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    def stop(self) -> None:
        if self._elector is not None:
            self._elector.stop(release=True)
        self._stop_leading()
        if self._recorder is not None:
            self._recorder.close()
        for informer in self._informers.values():
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
