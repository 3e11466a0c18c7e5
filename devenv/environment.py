"""The embedded default: a whole local installation in one object.

Used by `atomic-gang dev up` (through `daemon.py`), the demo and the e2e fixtures. It starts,
in order: the tools (built if missing), etcd + kube-apiserver, our CRD, the training
controllers' CRDs (JobSet, PyTorchJob, Trainer's, MPIJob's: always, so Kueue's integrations
for them find their APIs), Kueue's CRDs and manager, the training controllers themselves
(`training_controllers`: the JobSet controller, the training operator, Trainer and its
ClusterTrainingRuntime, and mpi-operator),
the EC2 emulator with an EKS cluster record pointing at the local
apiserver and the node role, instance profile and access entry the bootstrap would create, the
device-plugin DaemonSets (NVIDIA, EFA, Neuron, with the gang toleration unless told otherwise,
`device_plugins`), the node simulator (whose Nodes get GPUs and EFA only through those), the
chart's settings ConfigMap and ServiceAccount with the controller's role and its Pod Identity
association, the controller (the production Manager with the real engine
and Pulumi driver, in this process, with a short retryBackoff), the bootstrap's Kueue
objects, and the Job simulator (which, standing in for the scheduler, kubelet and Job
controller, runs admitted gangs of every kind to completion, with the pod simulator);
`stop()` ends all of them, last started first. `state()` is what `dev status` prints.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from devenv import chart_install, device_plugins
from devenv import kueue_objects as ko
from devenv.bootstrap import (
    ControllerIdentity,
    NodeIdentity,
    register_cluster_and_identity,
    register_controller_identity,
)
from devenv.controlplane import ControlPlane, ensure_namespace
from devenv.emulator import EmulatorClient, EmulatorProcess
from devenv.jobsim import JobSimulator
from devenv.kueue_manager import DEFAULT_WAIT_FOR_PODS_READY, KueueManager
from devenv.nodesim import NodeSimulator
from devenv.podsim import PodSimulator
from devenv.processes import free_port
from devenv.state_backend import seed_state_backend
from devenv.training_controllers import TrainingControllers
from devenv.webhook import LocalWebhook
from provisioner.api import constants as c
from provisioner.api.clock import SystemClock
from provisioner.api.gang_class import load_class_crd
from provisioner.api.gangnodepool import load_crd
from provisioner.api.settings import OwnershipSettings, Settings
from provisioner.cloud.ec2api import new_session
from provisioner.cloud.iam_policy import StackState
from provisioner.toolchain import installer as toolchain

DEFAULT_CLUSTER = "atomic-gang-local"
DEFAULT_REGION = "us-east-1"
CONTROLLER_NAMESPACE = "atomic-gang-system"
LEASE_NAME = "atomic-gang-provisioner"
PASSPHRASE = "local-devenv"
# The node simulator signs with a key of its own, so the emulator's per-call accounting tells
# its polling (what kubelets and nodeadm stand in for) apart from the controller's calls.
NODE_SIMULATOR_KEY = "node-simulator"


class MovableClock(SystemClock):
    """Real time plus `offset` seconds, for the wall clock only: the controller's
    timestamps and decisions follow the emulator's clock when a test moves it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def wall(self) -> datetime:
        return super().wall() + timedelta(seconds=self.offset)

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.offset)


@dataclass
class LocalEnvironment:
    work_dir: Path
    cluster_name: str = DEFAULT_CLUSTER
    region: str = DEFAULT_REGION
    with_kueue: bool = True
    join_delay: float = 2.0
    # How long after a Node turns Ready its device plugins register its GPUs, EFA and
    # Neuron devices (a few seconds, so the demo shows the wait a real cluster has).
    device_plugin_delay: float = 3.0
    # Device-plugin DaemonSets installed as upstream ships them, without the gang
    # toleration (by name, e.g. `device_plugins.NVIDIA_PLUGIN.name`): they never run on gang
    # nodes, so those Nodes never advertise the plugin's resources.
    device_plugins_without_gang_toleration: tuple[str, ...] = ()
    # Kueue's waitForPodsReady when this environment starts its own Kueue manager (the e2e
    # fixtures share the session's): its Configuration block, or None for off.
    kueue_wait_for_pods_ready: dict[str, Any] | None = field(
        default_factory=lambda: dict(DEFAULT_WAIT_FOR_PODS_READY)
    )
    with_controller: bool = True
    # The chart's Job webhook beside the in-process controller (devenv/webhook.py).
    with_webhook: bool = True
    keep_warm_ttl: str = "10m"
    job_run_seconds: float = 3.0
    acquire_attempts_before_retry: int = 20
    # Short by default (a local run must see a stuck join fail); the admission bench's slow
    # series simulates a 60 s boot and needs longer.
    join_deadline_seconds: int = 60
    # The product's default; a test of a block's end sets it short, as the controller's
    # clock is real.
    capacity_block_release_seconds: int = 2100
    # The controller (its own calls and its stacks' Pulumi CLI) signs with its role's
    # credentials, assumed as its pods do, so the emulator evaluates the product's policy
    # (`iam_policy.controller_policy`) on every call it makes. Off: the fixed "local" keys,
    # which the emulator takes as the account's root.
    enforce_controller_policy: bool = True
    # The controller's `tenancy` settings (e.g. {"sharedPools": [...]}); empty: the default.
    tenancy: dict[str, Any] = field(default_factory=dict)
    # The controller's `instances` settings (company rules: {"extraTags": {...},
    # "rootVolume": {...}}); empty: the default.
    instances: dict[str, Any] = field(default_factory=dict)
    # The controller's `blockPurchase` settings ({"enabled": true, "maxUpfrontFeePerGang":
    # ...}); enabled, its role's policy grants the purchase too. Empty: buying is off.
    block_purchase: dict[str, Any] = field(default_factory=dict)
    # The controller's clock: real time, moved forward with the emulator's (`advance_clock`).
    clock: MovableClock = field(default_factory=lambda: MovableClock())
    # Run the JobSet controller, the training operator, Trainer and mpi-operator (their CRDs
    # are installed either way), so JobSet, PyTorchJob, TrainJob and MPIJob gangs run. The
    # e2e fixture sets the session's shared ones instead (`training`).
    training_controllers: bool = True
    # The Job simulator creates each running Job's Pods, as the Job controller would, and
    # places and runs them (`jobsim`); off, it only writes Job status, which keeps benches of
    # hundreds of Jobs cheap.
    simulate_pods: bool = True
    training: TrainingControllers | None = None
    control_plane: ControlPlane | None = None
    kueue: KueueManager | None = None
    emulator: EmulatorProcess | None = None
    nodes: NodeSimulator | None = None
    identity: NodeIdentity | None = None
    controller_identity: ControllerIdentity | None = None
    # The keys the controller signs with (`_controller_keys`), for tests that act as it.
    controller_keys: dict[str, str] | None = None
    settings: Settings | None = None
    manager: Any = None
    _stack_driver: Any = None
    # The controller's Kubernetes client: closed on stop, so its TLS connections to the API
    # server are not left for the garbage collector to report in a later test.
    _kube: Any = None
    jobs: JobSimulator | None = None
    pods: PodSimulator | None = None
    webhook: LocalWebhook | None = None
    queue_namespaces: tuple[str, ...] = ("default",)
    owns_base: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def start(self) -> dict[str, Any]:
        self.owns_base = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        resolved = self._timed("tools", toolchain.ensure_all)
        self.control_plane = ControlPlane(
            self.work_dir / "control-plane", resolved["etcd"], resolved["kube-apiserver"]
        )
        self._timed("control plane", self.control_plane.start)
        self._timed("CRDs", lambda: self.control_plane.install_crds([load_crd(), load_class_crd()]))  # type: ignore[union-attr]
        training = TrainingControllers(self.control_plane, resolved)
        self._timed("training controllers' CRDs", training.install_crds)
        if self.with_kueue:
            self.kueue = KueueManager(
                self.control_plane, resolved["kueue"], self.kueue_wait_for_pods_ready
            )
            self._timed("Kueue CRDs", self.kueue.install_crds)
            self._timed("Kueue manager", self.kueue.start)
        if self.training_controllers:
            self.training = training
            self._timed("training controllers", training.start)
            for name, seconds in training.start_seconds.items():
                self.timings[name] = seconds
        self.emulator = EmulatorProcess(log_dir=self.work_dir / "logs")
        self._timed("EC2 emulator", self.emulator.start)
        return self.start_gang_parts(resolved["pulumi"])

    def start_gang_parts(self, pulumi: Any) -> dict[str, Any]:
        """Everything above the control plane, Kueue and the emulator.

        `start` calls it after starting those; the e2e fixtures set them to the session's
        shared ones and call it directly, so `stop` then leaves the shared parts running.
        """
        assert self.control_plane is not None and self.emulator is not None
        self.work_dir.mkdir(parents=True, exist_ok=True)
        info = self.control_plane.info
        assert info is not None, "the control plane must be started first"
        self.identity = register_cluster_and_identity(
            self.emulator.endpoint_url, info, self.cluster_name, self.region
        )
        api = self.control_plane.api_client()
        device_plugins.install(
            k8s.AppsV1Api(api),
            without_gang_toleration=self.device_plugins_without_gang_toleration,
        )
        self.nodes = NodeSimulator(
            core=k8s.CoreV1Api(api),
            ec2=self.ec2_client(access_key=NODE_SIMULATOR_KEY),
            cluster_name=self.cluster_name,
            join_delay=self.join_delay,
            events=self.emulator_client,
            devices=device_plugins.DeviceRegistrar(
                k8s.CoreV1Api(api), k8s.AppsV1Api(api), delay=self.device_plugin_delay
            ),
        )
        self.nodes.start()
        if self.with_controller:
            self._timed("controller", lambda: self._start_controller(pulumi))
        if self.with_kueue:
            self._timed("Kueue objects", self._apply_kueue_objects)
            self.jobs = JobSimulator(
                self.control_plane.api_client(), self.job_run_seconds, pods=self.simulate_pods
            )
            self.jobs.start()
            self.pods = PodSimulator(self.control_plane.api_client(), self.job_run_seconds)
            self.pods.start()
        return self.state()

    @property
    def emulator_client(self) -> EmulatorClient:
        assert self.emulator is not None
        return EmulatorClient(self.emulator.endpoint_url)

    @property
    def settings_path(self) -> Path:
        return self.work_dir / "controller-settings.yaml"

    @property
    def pulumi_env(self) -> dict[str, str]:
        """What `pulumi stack ls` needs to read the controller's stacks (in the emulator's
        S3 bucket; their secrets are under its KMS key, so no passphrase)."""
        assert self.emulator is not None
        return seed_state_backend(self.emulator.endpoint_url, self.region).cli_environment()

    def controller_settings(self) -> Settings:
        """What the controller is told here: this environment's cluster, emulator and
        identity, short waits (a local run must show a retry in seconds)."""
        assert self.emulator is not None and self.identity is not None
        # The stacks live where production keeps them, an S3 bucket with KMS secrets, made
        # here in the emulator (again after a reset, which forgets them).
        state = seed_state_backend(self.emulator.endpoint_url, self.region)
        return Settings.model_validate(
            {
                "clusterName": self.cluster_name,
                "defaults": {
                    "region": self.region,
                    "nodeRoleArn": self.identity.role_arn,
                    "keepWarmTTL": self.keep_warm_ttl,
                },
                "acquireAttemptsBeforeRetry": self.acquire_attempts_before_retry,
                "joinDeadlineSeconds": self.join_deadline_seconds,
                "capacityBlockReleaseSeconds": self.capacity_block_release_seconds,
                "reapIntervalSeconds": 5,
                # Short waits: a test must see a retry within seconds, not minutes.
                "retryBackoff": {"initial": "500ms", "max": "4s"},
                "leaderElection": {
                    "leaseNamespace": CONTROLLER_NAMESPACE,
                    "leaseName": LEASE_NAME,
                    "leaseDuration": "6s",
                    "renewDeadline": "4s",
                    "retryPeriod": "1s",
                },
                "healthPort": free_port(),
                "metricsPort": free_port(),
                "pulumi": {"stateDir": str(self.work_dir / "pulumi"), **state.pulumi_settings()},
                "aws": {"endpointUrl": self.emulator.endpoint_url},
                # The manager serves no webhook itself; `LocalWebhook` serves it and
                # registers it as the chart does.
                "webhook": {"enabled": False},
                "tenancy": self.tenancy,
                **({"instances": self.instances} if self.instances else {}),
                **({"blockPurchase": self.block_purchase} if self.block_purchase else {}),
            }
        )

    def _start_controller(self, pulumi: Any) -> None:
        # Imported here: `dev up --no-controller` style callers and the e2e fixtures that only
        # want Kueue must not pay for the controller's imports.
        from provisioner.assembly import build_system
        from provisioner.kube.client import KubeClient
        from provisioner.kube.pool_reads import pool_lookup

        assert self.control_plane is not None and self.emulator is not None
        # The stack driver hands this process's environment to the Pulumi CLI, whose dynamic
        # providers build their boto3 clients from it: fixed emulator keys, so a developer's
        # real profile is never used against the emulator (nor the emulator's keys elsewhere).
        os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
        os.environ.pop("AWS_PROFILE", None)
        os.environ["AWS_DEFAULT_REGION"] = self.region
        ensure_namespace(self.control_plane.api_client(), CONTROLLER_NAMESPACE)
        settings = self.controller_settings()
        # What they read without it, from the cluster: the chart's settings ConfigMap and
        # ServiceAccount, and the controller's role with its Pod Identity association.
        helm = toolchain.ensure_all(["helm"])["helm"].binary
        rendered = chart_install.install(
            self.control_plane.api_client(), helm, settings, CONTROLLER_NAMESPACE
        )
        # The chart's default ownership key: self-managed in the Secret it rendered.
        self.settings = settings.model_copy(
            update={"ownership": OwnershipSettings.model_validate(rendered["ownership"])}
        )
        # What `atomic-gang doctor --work-dir` and `explain` read to find this installation.
        self.settings_path.write_text(
            yaml.safe_dump(self.settings.model_dump(mode="json", exclude_defaults=True))
        )
        self.controller_identity = self._register_controller_identity()
        keys = self.controller_keys = self._controller_keys()
        for name, value in (
            ("AWS_ACCESS_KEY_ID", keys["aws_access_key_id"]),
            ("AWS_SECRET_ACCESS_KEY", keys["aws_secret_access_key"]),
            ("AWS_SESSION_TOKEN", keys.get("aws_session_token", "")),
        ):
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        # The controller's session, made as the product makes it (`ec2api.new_session`).
        session = new_session(**keys, region_name=self.region)
        kube = self._kube = KubeClient.from_kubeconfig(self.kubeconfig_path())
        system = build_system(
            self.settings,
            kube,
            pulumi.binary.parent.parent,
            identity=f"devenv-{uuid.uuid4().hex[:6]}",
            session=session,
            aws_max_attempts=2,
            clock=self.clock,
        )
        self.manager, self._stack_driver = system.manager, system.driver
        self.manager.start(serve_http=True)
        if self.with_webhook:
            self.webhook = LocalWebhook(
                self.control_plane.api_client(),
                helm,
                self.work_dir / "webhook",
                CONTROLLER_NAMESPACE,
            )
            self.webhook.start(self.settings, pool_lookup(kube.with_timeout(5.0)))

    def advance_clock(self, seconds: float) -> None:
        """Move EC2's clock and the controller's together (a Capacity Block's start or end
        comes without waiting for it), then wake every pool, as a resync would: a pool
        waiting for a time on its own clock is not woken by the move."""
        self.emulator_client.advance_clock(seconds)
        self.clock.offset += seconds
        assert self.control_plane is not None
        custom = k8s.CustomObjectsApi(self.control_plane.api_client())
        gnp = (c.GROUP, c.VERSION, c.GNP_PLURAL)
        for pool in custom.list_cluster_custom_object(*gnp)["items"]:
            custom.patch_cluster_custom_object(
                *gnp,
                pool["metadata"]["name"],
                {"metadata": {"annotations": {"devenv/clock": str(self.clock.offset)}}},
            )

    def _controller_keys(self) -> dict[str, str]:
        """The controller's credentials: its role's, through STS AssumeRole (the role's
        trust lets the account's principals assume it, as `doctor --as-controller` needs),
        or the fixed "local" keys when `enforce_controller_policy` is off."""
        local = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
        if not self.enforce_controller_policy:
            return local
        assert self.emulator is not None and self.controller_identity is not None
        sts = new_session(**local).client(
            "sts", region_name=self.region, endpoint_url=self.emulator.endpoint_url
        )
        creds = sts.assume_role(
            RoleArn=self.controller_identity.role_arn,
            RoleSessionName="atomic-gang-controller",
            DurationSeconds=43200,
        )["Credentials"]
        return {
            "aws_access_key_id": str(creds["AccessKeyId"]),
            "aws_secret_access_key": str(creds["SecretAccessKey"]),
            "aws_session_token": str(creds["SessionToken"]),
        }

    def _register_controller_identity(self) -> ControllerIdentity:
        assert self.emulator is not None and self.identity is not None
        backend = seed_state_backend(self.emulator.endpoint_url, self.region)
        key = backend.client("kms").describe_key(KeyId=backend.key_alias)["KeyMetadata"]["Arn"]
        return register_controller_identity(
            self.emulator.endpoint_url,
            self.cluster_name,
            self.region,
            namespace=CONTROLLER_NAMESPACE,
            service_account=chart_install.SERVICE_ACCOUNT,
            node_role_arn=self.identity.role_arn,
            state=StackState(backend.bucket, key, backend.prefix),
            buy_capacity_blocks=self.block_purchase.get("enabled", False),
        )

    def kubeconfig_path(self) -> Path:
        assert self.control_plane is not None and self.control_plane.info is not None
        return self.control_plane.info.kubeconfig

    def _apply_kueue_objects(self) -> None:
        assert self.control_plane is not None
        custom = k8s.CustomObjectsApi(self.control_plane.api_client())
        objects = ko.default_objects(
            self.queue_namespaces, ko.LOCAL_QUOTAS, class_spec=ko.LOCAL_CLASS_SPEC
        )
        for obj in objects:
            ko.apply_object(custom, obj)

    def ec2_client(self, access_key: str = "local") -> Any:
        assert self.emulator is not None
        # Made as the product makes its clients (`ec2api.new_session`), so the node
        # simulator's and the benches' listings parse as cheaply as the controller's.
        return new_session(aws_access_key_id=access_key, aws_secret_access_key="local").client(
            "ec2", region_name=self.region, endpoint_url=self.emulator.endpoint_url
        )

    def stop(self) -> None:
        if self.webhook is not None:  # first: a stopped environment must block no Job
            self.webhook.stop()
        if self.jobs is not None:
            self.jobs.stop()
        if self.pods is not None:
            self.pods.stop()
        if self.manager is not None:
            self.manager.stop()
        if self._stack_driver is not None:
            self._stack_driver.close()
        if self._kube is not None:
            self._kube.close()
            self._kube = None
        if self.nodes is not None:
            self.nodes.stop()
        if not self.owns_base:
            return
        for part in (self.emulator, self.training, self.kueue, self.control_plane):
            if part is not None:
                part.stop()

    def state(self) -> dict[str, Any]:
        cp = self.control_plane.info if self.control_plane else None
        return {
            "workDir": str(self.work_dir),
            "cluster": self.cluster_name,
            "region": self.region,
            "apiserver": cp.endpoint if cp else None,
            "kubeconfig": str(cp.kubeconfig) if cp else None,
            "kueueWebhookPort": self.kueue.webhook_port if self.kueue else None,
            "ec2Endpoint": self.emulator.endpoint_url if self.emulator else None,
            "nodeRoleArn": self.identity.role_arn if self.identity else None,
            "controllerRoleArn": (
                self.controller_identity.role_arn if self.controller_identity else None
            ),
            "pulumiBackend": self.settings.pulumi.backend_url if self.settings else None,
            "pulumiProject": f"atomic-gang-{self.cluster_name}",
            "localQueue": f"default/{ko.QUEUE_NAME}",
            "trainingControllers": (
                {name: proc.pid for name, proc in self.training.processes().items()}
                if self.training
                else None
            ),
            "settings": str(self.settings_path) if self.settings else None,
            "controllerHealth": (
                f"http://127.0.0.1:{self.settings.health_port}/healthz" if self.settings else None
            ),
            "pid": os.getpid(),
            "startSeconds": {k: round(v, 2) for k, v in self.timings.items()},
        }

    def _timed(self, what: str, step: Any) -> Any:
        started = time.monotonic()
        result = step()
        self.timings[what] = time.monotonic() - started
        return result
