"""The composition root: the running controller, built from `Settings` in one place.

`build_system` makes the EC2 engine (boto3 clients for the settings' region and endpoint),
the stack driver and its port, and the metrics registry the port reports to; `build_manager`
makes everything the controller runs on them — the informers and the typed caches the
reconcilers read, the three reconcilers and their work queues, the stack executor, the
instance index, the reaper, the Event recorder and the leader election — and hands them to
the `Manager`, which only starts and stops them. Called by `atomic-gang controller`
(``commands.controller``), the local environment (``devenv.environment``) and the in-process
test harnesses; what differs between them (credentials, retries, identity) is an argument,
not a second copy of the wiring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.api import constants as c
from provisioner.api.clock import SYSTEM_CLOCK, SystemClock
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.nodes import Node
from provisioner.api.owners import GangOwner
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.cloud.ec2api import build_clients, default_session
from provisioner.cloud.engine import Ec2Engine
from provisioner.controllers.admissioncheck import AdmissionCheckReconciler
from provisioner.controllers.gangnodepool import GangNodePoolReconciler
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.manager import WORKLOAD_WORKERS, ControllerParts, Manager
from provisioner.controllers.metrics import ControllerMetrics, QueueMetrics, StackMetrics
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
    ResourceRef,
)
from provisioner.kube.workqueue import Controller
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.port import PoolStacks

__all__ = ["System", "build_manager", "build_system"]

# botocore's standard retry mode absorbs short bursts; what survives is the reconciler's.
DEFAULT_AWS_ATTEMPTS = 5


@dataclass(frozen=True)
class System:
    """The parts of one controller. ``manager`` is built, not started."""

    manager: Manager
    engine: Ec2Engine
    stacks: PoolStacks
    driver: StackDriver


def build_system(
    settings: Settings,
    kube: KubeClient,
    pulumi_root: Path,
    *,
    identity: str | None = None,
    session: Any | None = None,
    aws_max_attempts: int = DEFAULT_AWS_ATTEMPTS,
    on_lost_leadership: Callable[[], None] | None = None,
) -> System:
    """The controller for ``settings`` on ``kube``, with the Pulumi CLI under
    ``pulumi_root``. ``session`` is a boto3 session (default: the default credential
    chain: Pod Identity, IRSA, env, instance role)."""
    region = settings.defaults.region
    clients = build_clients(
        session or default_session(),
        region,
        settings.aws.endpoint_url,
        max_attempts=aws_max_attempts,
    )
    engine = Ec2Engine(clients, SystemClock())
    driver = StackDriver(settings, pulumi_root, logging.getLogger("pulumi"))
    metrics = ControllerMetrics()
    stacks = PoolStacks(driver, StackMetrics(metrics))
    manager = build_manager(
        settings,
        kube,
        engine,
        stacks,
        metrics,
        identity=identity or default_identity(),
        on_lost_leadership=on_lost_leadership,
    )
    return System(manager=manager, engine=engine, stacks=stacks, driver=driver)


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_manager(
    settings: Settings,
    kube: KubeClient,
    engine: EngineOps,
    stacks: StackOps,
    metrics: ControllerMetrics,
    *,
    identity: str,
    on_lost_leadership: Callable[[], None] | None = None,
    now: Callable[[], datetime] = utc_now,
) -> Manager:
    """Everything the controller runs on ``kube``, ``engine`` and ``stacks``, handed to a
    Manager (built, not started)."""
    informers: list[Informer] = []

    def informer(
        name: str,
        ref: ResourceRef,
        label_selector: str | None = None,
        index_label: str | None = None,
    ) -> Informer:
        built = Informer(
            kube.list_watch(ref, label_selector=label_selector), name=name, index_label=index_label
        )
        informers.append(built)
        return built

    workloads = informer("workloads", WORKLOADS)
    pools = informer("gangnodepools", GANG_NODE_POOLS)
    checks = informer("admissionchecks", ADMISSION_CHECKS)
    # Indexed by pool: each pool pass reads its own Nodes, not every pool's.
    nodes = informer("nodes", NODES, label_selector=c.POOL_LABEL, index_label=c.POOL_LABEL)
    # Only the Jobs of gang pools: the warm path reads owner Jobs from here, not by GET.
    jobs = informer("jobs", JOBS, label_selector=c.POOL_LABEL)
    typed_workloads = TypedCache(workloads, Workload.from_dict)
    typed_pools = TypedCache(pools, GangNodePool.from_dict)
    typed_checks = TypedCache(checks, AdmissionCheck.from_dict)
    # Events are written by a thread of their own: no pass waits on one.
    recorder = EventRecorder(kube.with_timeout(5), instance=identity, background=True)

    check_reconciler = AdmissionCheckReconciler(kube, typed_checks, settings.controller_name, now)
    workload_reconciler = WorkloadReconciler(
        kube,
        typed_workloads,
        typed_pools,
        typed_checks,
        TypedCache(jobs, GangOwner.from_dict),
        settings,
        recorder,
        now,
    )
    # A finished stack operation queues its pool again (pool_ctl exists by then: the
    # executor starts with the reconcilers).
    executor = StackExecutor(
        settings.stack_operations.workers,
        on_finished=lambda pool: pool_ctl.enqueue(ObjectKey("", pool)),
        metrics=metrics,
    )
    # One listing of EC2 shared by every settled pool, instead of one per pool per pass.
    index = InstanceIndex(
        engine,
        settings.cluster_name,
        settings.instance_index_refresh_seconds,
        SYSTEM_CLOCK,
        metrics,
    )
    typed_nodes = TypedCache(nodes, Node.from_dict)
    pool_reconciler = GangNodePoolReconciler(
        PoolReconcilerDeps(
            kube=kube,
            pools=typed_pools,
            nodes=typed_nodes,
            engine=engine,
            index=index,
            stacks=stacks,
            executor=executor,
            settings=settings,
            recorder=recorder,
            now=now,
            metrics=metrics,
        )
    )
    check_ctl = Controller(
        "admissioncheck",
        check_reconciler.reconcile,
        observer=QueueMetrics(metrics, "admissioncheck"),
    )
    check_ctl.watch(checks)
    workload_ctl = Controller(
        "workload",
        workload_reconciler.reconcile,
        max_concurrent=WORKLOAD_WORKERS,
        observer=QueueMetrics(metrics, "workload"),
    )
    workload_ctl.watch(workloads)
    workload_ctl.watch(pools, typed_pools.to_keys(workload_reconciler.keys_for_pool))
    pool_ctl = Controller(
        "gangnodepool",
        pool_reconciler.reconcile,
        max_concurrent=settings.max_concurrent_pool_reconciles,
        observer=QueueMetrics(metrics, "gangnodepool"),
    )
    pool_ctl.watch(pools)
    pool_ctl.watch(nodes, typed_nodes.to_keys(pool_reconciler.keys_for_node))
    # A Workload whose check becomes ours (or Active) must be looked at again.
    workload_ctl.watch(checks, lambda _check: [ObjectKey(*k) for k in workloads.list_keys()])

    reaper = Reaper(
        engine,
        settings.cluster_name,
        lambda: pool_facts(typed_pools.list()),
        settings.reap_interval_seconds,
        now,
        metrics,
        forget=index.forget,
    )
    parts = ControllerParts(
        informers=tuple(informers),
        controllers=(check_ctl, workload_ctl, pool_ctl),
        executor=executor,
        index=index,
        reaper=reaper,
        stacks=stacks,
        recorder=recorder,
    )
    election = settings.leader_election
    if not election.enabled:
        return Manager(settings, parts, identity, metrics, on_lost_leadership=on_lost_leadership)
    # The elector calls the Manager it is handed to (bound once `manager` exists: the
    # elector starts with the Manager).
    elector = LeaderElector(
        LeaseLock(kube.with_timeout(5), election.lease_namespace, election.lease_name),
        identity,
        on_started_leading=lambda: manager.start_leading(),
        on_stopped_leading=lambda: manager.stop_leading(),
        lease_duration=election.lease_duration.total_seconds(),
        renew_deadline=election.renew_deadline.total_seconds(),
        retry_period=election.retry_period.total_seconds(),
    )
    manager = Manager(
        settings, parts, identity, metrics, elector=elector, on_lost_leadership=on_lost_leadership
    )
    return manager
