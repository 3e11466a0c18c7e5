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
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.api import constants as c
from provisioner.api.clock import SYSTEM_CLOCK, Clock, SystemClock
from provisioner.api.gang_class import GangClass
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.nodes import Node
from provisioner.api.owners import GangOwner
from provisioner.api.settings import Settings
from provisioner.api.workload import AdmissionCheck, Workload
from provisioner.cloud import naming
from provisioner.cloud.ec2api import build_clients, default_session
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.fencing import leader_gate
from provisioner.controllers.admissioncheck import AdmissionCheckReconciler
from provisioner.controllers.instance_index import InstanceIndex
from provisioner.controllers.launch_budget import LaunchBudget
from provisioner.controllers.manager import WORKLOAD_WORKERS, ControllerParts, Manager
from provisioner.controllers.metrics import (
    AwsCallMetrics,
    ControllerMetrics,
    QueueMetrics,
    StackMetrics,
    WebhookMetrics,
)
from provisioner.controllers.pool.deps import PoolReconcilerDeps
from provisioner.controllers.pool.reconciler import GangNodePoolReconciler
from provisioner.controllers.pool.stack_executor import StackExecutor
from provisioner.controllers.ports import EngineOps, StackOps
from provisioner.controllers.reaper import Reaper, pool_facts, stack_resource_ids
from provisioner.controllers.workload.claim_index import claim_index
from provisioner.controllers.workload.deps import WorkloadReconcilerDeps
from provisioner.controllers.workload.reconciler import WorkloadReconciler
from provisioner.host import HostResources, read_host
from provisioner.kube.admission_reads import (
    class_lookup,
    node_pool_lookup,
    owner_lookup,
    queue_check_lookup,
    queue_class_lookup,
)
from provisioner.kube.cache import TypedCache, read_by
from provisioner.kube.client import KubeClient
from provisioner.kube.discovery import served_owner_kinds, serves
from provisioner.kube.events import EventRecorder
from provisioner.kube.informer import Informer, label_index
from provisioner.kube.leader import LeaderElector, LeaseLock, LeaseTerm, default_identity
from provisioner.kube.ownership_key import KubeOwnershipKeyStore, ensure_ownership_key
from provisioner.kube.pool_reads import pool_lookup
from provisioner.kube.resources import (
    ADMISSION_CHECKS,
    GANG_CLASSES,
    GANG_NODE_POOLS,
    NODES,
    WORKLOADS,
    ObjectKey,
    ResourceRef,
    owner_resource,
)
from provisioner.kube.webhook_certs import KubeCertStore
from provisioner.kube.workqueue import Controller
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.fence import Fence, FencingToken
from provisioner.pulumi_driver.port import PoolStacks
from provisioner.webhook.certs import CertPolicy
from provisioner.webhook.review import PoolLookup
from provisioner.webhook.rotator import CertRotator
from provisioner.webhook.served import ServedWebhook
from provisioner.webhook.server import WebhookServer

__all__ = [
    "ManagerInputs",
    "ServedWebhook",
    "System",
    "build_manager",
    "build_system",
    "build_webhook",
]

log = logging.getLogger(__name__)

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
    clock: Clock | None = None,
) -> System:
    """The controller for ``settings`` on ``kube``, with the Pulumi CLI under
    ``pulumi_root``. ``session`` is a boto3 session (default: the default credential
    chain: Pod Identity, IRSA, env, instance role). ``clock`` (default: the system's) is the
    time the engine and the reconcilers read: the local environment's moves with its EC2
    emulator's, so a Capacity Block's day passes in a test without waiting it."""
    region = settings.defaults.region
    metrics = ControllerMetrics()
    # Enforced when replicas elect a leader: each renewal extends it (`build_manager`).
    fence = Fence(enforced=settings.leader_election.enabled)
    clients = build_clients(
        session or default_session(),
        region,
        settings.aws.endpoint_url,
        max_attempts=aws_max_attempts,
        # Every EC2, SSM, EKS and IAM call the engine makes, by action and error code.
        observer=AwsCallMetrics(metrics),
        # No mutating call leaves while the fence is closed (``cloud.fencing``).
        gate=leader_gate(lambda: fence.token() is not None),
    )
    ownership_key = read_ownership_key(settings, kube)
    clock = clock or SystemClock()
    engine = Ec2Engine(clients, clock, ownership_key)
    driver = StackDriver(settings, pulumi_root, logging.getLogger("pulumi"), fence=fence)
    stacks = PoolStacks(driver, StackMetrics(metrics))
    manager = build_manager(
        ManagerInputs(
            settings=settings,
            kube=kube,
            engine=engine,
            stacks=stacks,
            metrics=metrics,
            identity=identity or default_identity(),
            # The host is read here, once: what it offers sizes the stack executor.
            host=read_host(),
            on_lost_leadership=on_lost_leadership,
            # Each renewal extends the stack driver's fence (``pulumi_driver.fence``).
            on_renewed=lambda term: fence.extend(
                FencingToken(
                    term.holder, term.lease_transitions, term.valid_until, term.others_fenced_since
                )
            ),
            ownership_key=ownership_key,
            now=clock.now,
        )
    )
    return System(manager=manager, engine=engine, stacks=stacks, driver=driver)


# Startup fails after this rather than wait on an unreachable API server: the Pod restarts.
_OWNERSHIP_KEY_READ_SECONDS = 10.0


def read_ownership_key(settings: Settings, kube: KubeClient) -> naming.OwnershipKey | None:
    """The cluster's ownership key, read once before anything launches: from
    `ownership.keyFile`, or from the Secret of `ownership.selfManaged` (generated there on
    first start). Raises, rather than run without it, when the configured key cannot be
    had: a replica signing launch tokens differently from its predecessor would send a
    different token on a crash-retry of the same launch, and every instance it launched
    unsigned would stay unprovable once its pool is gone."""
    managed = settings.ownership.self_managed
    if managed is None:
        return naming.read_ownership_key(settings.ownership.key_file)
    store = KubeOwnershipKeyStore(
        kube.with_timeout(_OWNERSHIP_KEY_READ_SECONDS),
        namespace=managed.namespace,
        secret_name=managed.secret_name,
    )
    return naming.OwnershipKey(
        ensure_ownership_key(store, min_bytes=naming.OWNERSHIP_KEY_MIN_BYTES)
    )


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ManagerInputs:
    """What `build_manager` builds the controller from: the settings, the outside systems
    (``kube``, ``engine``, ``stacks``), the host it sizes itself to, and the hooks the
    caller keeps (leadership lost or renewed)."""

    settings: Settings
    kube: KubeClient
    engine: EngineOps
    stacks: StackOps
    metrics: ControllerMetrics
    identity: str
    host: HostResources
    on_lost_leadership: Callable[[], None] | None = None
    now: Callable[[], datetime] = utc_now
    on_renewed: Callable[[LeaseTerm], None] | None = None
    ownership_key: naming.OwnershipKey | None = None


def build_manager(inputs: ManagerInputs) -> Manager:
    """Everything the controller runs on ``inputs.kube``, ``.engine`` and ``.stacks``,
    handed to a Manager (built, not started)."""
    settings, kube, engine, stacks = inputs.settings, inputs.kube, inputs.engine, inputs.stacks
    metrics, identity, host, now = inputs.metrics, inputs.identity, inputs.host, inputs.now
    on_lost_leadership, ownership_key = inputs.on_lost_leadership, inputs.ownership_key
    informers: list[Informer] = []

    def informer(
        name: str,
        ref: ResourceRef,
        label_selector: str | None = None,
        index: Callable[[dict[str, Any]], str | None] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Informer:
        built = Informer(
            kube.list_watch(ref, label_selector=label_selector), name=name, index=index, keep=keep
        )
        informers.append(built)
        return built

    workloads = informer("workloads", WORKLOADS)
    # Indexed by claimant: a Workload's pass reads the pools it claims, not every pool.
    pools = informer("gangnodepools", GANG_NODE_POOLS, index=claim_index)
    checks = informer("admissionchecks", ADMISSION_CHECKS)
    # Indexed by pool: each pool pass reads its own Nodes, not every pool's.
    # Nodes and owners are kept as far as their models read them: an EKS Node's images,
    # addresses and nodeInfo, and a Job's pod template, are most of each and never read.
    nodes = informer(
        "nodes",
        NODES,
        label_selector=c.POOL_LABEL,
        index=label_index(c.POOL_LABEL),
        keep=read_by(Node.from_dict),
    )
    # Only objects Kueue queues (Jobs, and the JobSets, PyTorchJobs, TrainJobs and MPIJobs
    # the apiserver serves, carrying the queue-name label): a gang of a GangClass carries no
    # label of ours, and one with the pool label has a queue too, or never gets a Workload.
    # Memory grows with the objects Kueue queues, as Kueue's own caches do, not with every
    # Job of the cluster. The warm path reads owners from here, not by GET.
    owners = {
        kind: TypedCache(
            informer(
                kind.plural,
                owner_resource(kind),
                label_selector=c.QUEUE_NAME_LABEL,
                keep=read_by(GangOwner.from_dict),
            ),
            GangOwner.from_dict,
        )
        for kind in served_owner_kinds(kube)
    }
    typed_workloads = TypedCache(workloads, Workload.from_dict, models_kept=_WORKLOAD_MODELS_KEPT)
    typed_pools = TypedCache(pools, GangNodePool.from_dict)
    typed_checks = TypedCache(checks, AdmissionCheck.from_dict)
    # Without the GangClass CRD at start-up (a CRD chart not yet upgraded, or discovery
    # failing) there is no informer: classes are read live (`class_lookup`), so a check
    # naming one says it does not exist until it does, and the rest runs as before.
    class_informer = (
        informer(c.GANG_CLASS_PLURAL, GANG_CLASSES) if serves(kube, GANG_CLASSES) else None
    )
    typed_classes = TypedCache(class_informer, GangClass.from_dict) if class_informer else None
    classes = class_lookup(kube, typed_classes)

    # Events are written by a thread of their own: no pass waits on one.
    recorder = EventRecorder(kube.with_timeout(5), instance=identity, background=True)

    check_reconciler = AdmissionCheckReconciler(
        kube, typed_checks, settings.controller_name, now, classes=classes, settings=settings
    )
    workload_reconciler = WorkloadReconciler(
        WorkloadReconcilerDeps(
            kube=kube,
            workloads=typed_workloads,
            pools=typed_pools,
            checks=typed_checks,
            classes=classes,
            owners=owners,
            settings=settings,
            recorder=recorder,
            now=now,
            instance_types=engine.instance_types,
            queue_checks=queue_check_lookup(kube.with_timeout(_POOL_READ_SECONDS)),
        )
    )
    # A finished stack operation queues its pool again (pool_ctl exists by then: the
    # executor starts with the reconcilers).
    executor = StackExecutor(
        settings.stack_operations.workers_on(host.cpus, host.memory_limit),
        on_finished=lambda pool: pool_ctl.enqueue(ObjectKey("", pool)),
        metrics=metrics,
    )
    # One listing of EC2 shared by every settled pool, instead of one per pool per pass.
    index = InstanceIndex(
        engine,
        settings.cluster_name,
        settings.instance_index_refresh.total_seconds(),
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
            ownership_key=ownership_key,
            # One budget for the account's launches and one for its CreateTags (a bucket of
            # its own at EC2), each shared by every pool's passes.
            budget=LaunchBudget(settings.launch_budget),
            tag_budget=LaunchBudget(settings.launch_budget),
        )
    )
    check_ctl = Controller(
        "admissioncheck",
        check_reconciler.reconcile,
        observer=QueueMetrics(metrics.runtime, "admissioncheck"),
    )
    check_ctl.watch(checks)
    workload_ctl = Controller(
        "workload",
        workload_reconciler.reconcile,
        max_concurrent=WORKLOAD_WORKERS,
        observer=QueueMetrics(metrics.runtime, "workload"),
    )
    workload_ctl.watch(workloads)
    workload_ctl.watch(pools, typed_pools.to_keys(workload_reconciler.keys_for_pool))
    pool_ctl = Controller(
        "gangnodepool",
        pool_reconciler.reconcile,
        max_concurrent=settings.max_concurrent_pool_reconciles,
        observer=QueueMetrics(metrics.runtime, "gangnodepool"),
    )
    pool_ctl.watch(pools)
    pool_ctl.watch(nodes, typed_nodes.to_keys(pool_reconciler.keys_for_node))
    # A Workload whose check becomes ours (or Active) must be looked at again.
    workload_ctl.watch(checks, lambda _check: [ObjectKey(*k) for k in workloads.list_keys()])
    if class_informer is not None and typed_classes is not None:
        # A class's change re-judges the checks naming it, and the Workloads behind them.
        check_ctl.watch(class_informer, typed_classes.to_keys(check_reconciler.keys_for_class))
        workload_ctl.watch(
            class_informer, lambda _cls: [ObjectKey(*k) for k in workloads.list_keys()]
        )

    reaper = Reaper(
        engine,
        settings.cluster_name,
        lambda: pool_facts(typed_pools.list()),
        settings.reap_interval.total_seconds(),
        now,
        metrics,
        forget=index.forget,
        # The reaper reads the pool cache: it acts only while that cache can be trusted.
        cache_problem=pools.problem,
        ownership_key=ownership_key,
        max_lifetime=settings.limits.max_lifetime,
        stack_record=stack_resource_ids(stacks),
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
        on_renewed=inputs.on_renewed,
    )
    manager = Manager(
        settings, parts, identity, metrics, elector=elector, on_lost_leadership=on_lost_leadership
    )
    return manager


# -- the Job webhook and its certificate (issue #30, certs) ------------------------------------
# A self-managed certificate is polled every couple of seconds on disk: the rotator writes a
# new pair only after the caBundle trusts it, and the switch should follow promptly.
_SELF_MANAGED_RELOAD_SECONDS = 2.0
# The webhook's live read of a Job's pool: well inside the API server's 10 s webhook timeout.
_POOL_READ_SECONDS = 5.0
# Workloads are read one at a time, by key, and most of a cluster's are other queues' or
# long finished: the models of the 1,024 read last (a wave of 1,000 gangs being admitted)
# are kept, the rest parsed again when read (tens of microseconds each).
_WORKLOAD_MODELS_KEPT = 1024


def build_webhook(
    settings: Settings,
    kube: KubeClient,
    *,
    pools: PoolLookup | None = None,
    host: str = "0.0.0.0",
    port: int | None = None,
    metrics: ControllerMetrics | None = None,
) -> ServedWebhook:
    """The webhook as `settings.webhook` asks: mounted certificate files, or self-managed.
    It reads the pools a Job names live (`pools`; by default a GET through `kube`, short
    enough to answer within the API server's webhook timeout), the Nodes a pod names and
    the owners a controller reference names the same way, and counts its answers on
    `metrics` (the controller's) when given."""
    reader = kube.with_timeout(_POOL_READ_SECONDS)
    if pools is None:
        pools = pool_lookup(reader)
    nodes, owners = node_pool_lookup(reader), owner_lookup(reader)
    classes = queue_class_lookup(reader, settings.controller_name)
    observer = WebhookMetrics(metrics) if metrics is not None else None
    managed = settings.webhook.self_managed
    cert_dir = settings.webhook.cert_dir
    if managed is None:
        server = WebhookServer.from_cert_dir(
            settings,
            cert_dir,
            pools=pools,
            host=host,
            port=port,
            observer=observer,
            nodes=nodes,
            owners=owners,
            classes=classes,
        )
        return ServedWebhook(server, None, threading.Event())
    server = WebhookServer.from_cert_dir(
        settings,
        cert_dir,
        pools=pools,
        host=host,
        port=port,
        reload_interval=_SELF_MANAGED_RELOAD_SECONDS,
        observer=observer,
        nodes=nodes,
        owners=owners,
        classes=classes,
    )
    store = KubeCertStore(
        kube,
        namespace=managed.namespace,
        secret_name=managed.secret_name,
        webhook_configuration=managed.webhook_configuration,
    )
    rotator = CertRotator(
        store,
        hosts=managed.hosts,
        policy=CertPolicy(managed.ca_validity, managed.cert_validity, managed.renew_fraction),
        serve_dir=cert_dir,
        ca_name=f"{managed.webhook_configuration}-webhook-ca",
        check_interval=managed.check_interval.total_seconds(),
    )
    return ServedWebhook(server, rotator, threading.Event())
