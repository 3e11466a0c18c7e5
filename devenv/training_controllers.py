"""The training-job controllers (JobSet, Kubeflow's training operator, Kubeflow Trainer) run
as local processes against the local control plane, each with the CRDs of its own build.

Gang jobs of kinds other than batch/v1 Job run under them: a JobSet under the JobSet
controller, a PyTorchJob under the training operator, a TrainJob under Trainer (which makes
a JobSet the JobSet controller runs). Each controller, its CRDs and its webhook manifests
come from the same module build (`versions.py`, `TRAINING_TOOLS`). `TrainingControllers`
is the three together, as the embedded default runs them: `install_crds` (always, before
Kueue starts, so Kueue's integrations for them find their APIs), `start`, `stop`.

Certificates differ by controller, because the upstream programs differ:
- JobSet and Trainer take a configuration file that switches their own certificate
  management off (as with Kueue); they serve with a certificate our CA signed, so their
  webhooks are registered with a 127.0.0.1 URL and that CA, and their objects go through
  them (once each hook's path has a handler: both add theirs after /readyz can pass).
  JobSet reads the certificate from a directory its configuration names; Trainer
  from controller-runtime's fixed `/tmp/k8s-webhook-server/serving-certs`, so it runs in a
  private mount namespace where a directory of its own is mounted on that path (on that path
  only: the rest of /tmp, where a tool cache or a kubeconfig may live, stays visible).
- The training operator always runs its own certificate rotator: it keeps a CA and a
  certificate for `<service>.<namespace>.svc` in a Secret, and its webhook server reads them
  from that fixed directory, where in a cluster the kubelet mounts the Secret. Here this
  module plays the kubelet: it copies the Secret into the process's private directory. Its
  webhooks are not registered: no Service network resolves the name the rotator certifies.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.controller_webhooks import OwnWebhooks, Webhooks, hooks_served
from devenv.controlplane import (
    ControlPlane,
    ControlPlaneInfo,
    ensure_namespace,
    http_ok,
)
from devenv.mpi_operator import MPIOperator
from devenv.processes import Supervised, descendants, free_port
from devenv.training_crds import (
    PYTORCHJOBS,
    jobset_crds,
    torch_runtime,
    trainer_crds,
    training_crds,
    training_operator_crds,
)
from provisioner.toolchain.installer import ResolvedTool

JOBSET_NAMESPACE = "jobset-system"
# Where the training operator keeps its webhook certificate Secret, and where Trainer would:
# the namespace each falls back to when not run as a pod.
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
TRAINER_NAMESPACE = "kubeflow-system"
_FIXED_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # as upstream fixes it
_READY_TIMEOUT = 180.0  # the rotator polls for its certificate with a doubling backoff


@dataclass(frozen=True)
class _Launch:
    """How one controller process is started: its argv, the kubeconfig path it is given, and
    what to do before each readiness probe."""

    argv: list[str]
    kubeconfig: str
    before_probe: Callable[[], None] = lambda: None


class _ControllerProcess(ABC):
    """What the three controllers share: their namespace made, a health and a webhook port
    chosen, the process supervised, ready once its /readyz answers and (where it has any)
    its webhooks have handlers and are registered, and stopped with those webhooks taken
    away (they fail closed). A subclass states only what differs: `_launch` (flags or
    configuration file, certificates), `crds`, `webhooks`, and the names below."""

    # Names the readiness wait in its timeout message: "JobSet /readyz".
    title: ClassVar[str] = ""
    # The process's name and log file (`<work>/logs/<process_name>.log`); the tool's name
    # when empty.
    process_name: ClassVar[str] = ""
    webhooks: ClassVar[OwnWebhooks | None] = None

    def __init__(self, control_plane: ControlPlane, tool: ResolvedTool, namespace: str) -> None:
        self._cp = control_plane
        self._tool = tool
        self._namespace = namespace
        self._proc: Supervised | None = None
        hooks = self.webhooks
        self._webhooks = None if hooks is None else Webhooks(control_plane, hooks)
        self.health_port = 0

    @property
    def name(self) -> str:
        return self._tool.tool.name

    @property
    def process(self) -> Supervised | None:
        return self._proc

    @abstractmethod
    def crds(self) -> list[dict[str, Any]]: ...

    def install_crds(self) -> list[str]:
        return self._cp.install_crds(self.crds())

    def start(self) -> None:
        info = self._cp.info
        assert info is not None, "start the control plane first"
        ensure_namespace(self._cp.api_client(), self._namespace)
        self.health_port, webhook_port = free_port(), free_port()
        launch = self._launch(info, info.work_dir / self.name, webhook_port)
        process_name = self.process_name or self.name
        self._proc = Supervised(
            process_name,
            launch.argv,
            info.work_dir / "logs" / f"{process_name}.log",
            env={**os.environ, "KUBECONFIG": launch.kubeconfig},
        )
        health = f"http://127.0.0.1:{self.health_port}/readyz"

        def ready() -> bool:
            launch.before_probe()
            return http_ok(health)

        title = self.title or self.name
        self._proc.wait_ready(ready, _READY_TIMEOUT, f"{title} /readyz")
        if self._webhooks is not None:
            docs = self._webhooks.configurations(self._tool, webhook_port, info.ca_pem)
            context = ssl.create_default_context(cadata=info.ca_pem.decode())
            self._proc.wait_ready(
                lambda: hooks_served(docs, context), _READY_TIMEOUT, f"{title} webhook handlers"
            )
            self._webhooks.register(docs)

    @abstractmethod
    def _launch(self, info: ControlPlaneInfo, work: Path, webhook_port: int) -> _Launch:
        """Write what the process reads (certificates, configuration) under `work`."""

    def stop(self) -> None:
        """Stop the process and take its fail-closed webhooks away with it."""
        if self._webhooks is not None:
            self._webhooks.remove()
        if self._proc is not None:
            self._proc.stop()
            self._proc = None


class JobSetManager(_ControllerProcess):
    """One JobSet controller process plus its JobSet webhook registrations."""

    title = "JobSet"
    process_name = "jobset-manager"
    webhooks = OwnWebhooks(
        "config/components/webhook/manifests.yaml", "jobset", frozenset({"jobset.x-k8s.io"})
    )

    def __init__(self, control_plane: ControlPlane, jobset: ResolvedTool) -> None:
        super().__init__(control_plane, jobset, JOBSET_NAMESPACE)

    def crds(self) -> list[dict[str, Any]]:
        return jobset_crds(self._tool)

    def _launch(self, info: ControlPlaneInfo, work: Path, webhook_port: int) -> _Launch:
        cert_dir = work / "certs"
        self._cp.ca.serving("127.0.0.1", "localhost").write(cert_dir, "tls.crt", "tls.key")
        config = _manager_configuration(
            "config.jobset.x-k8s.io/v1alpha1",
            self.health_port,
            {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            internalCertManagement={"enable": False},
        )
        config_path = work / "config.yaml"
        config_path.write_text(config)
        argv = [str(self._tool.binary), f"--config={config_path}", "--zap-log-level=info"]
        return _Launch(argv, str(info.kubeconfig))


class RotatingCertController(_ControllerProcess):
    """A Kubeflow controller (the training operator) whose certificate rotator keeps its
    webhook certificate in a Secret; this class copies that Secret where the process reads
    it, as the kubelet's Secret volume would. Its webhooks are not registered."""

    def __init__(
        self,
        control_plane: ControlPlane,
        tool: ResolvedTool,
        *,
        namespace: str,
        secret: str,
        extra_args: tuple[str, ...] = (),
        crd_kinds: tuple[str, ...] = (),
    ) -> None:
        super().__init__(control_plane, tool, namespace)
        self._secret = secret
        self._extra_args = extra_args
        self._crd_kinds = crd_kinds

    def crds(self) -> list[dict[str, Any]]:
        """Those of `crd_kinds` (plural names), all of the module's when none is named."""
        return training_operator_crds(self._tool, *self._crd_kinds)

    def _launch(self, info: ControlPlaneInfo, work: Path, webhook_port: int) -> _Launch:
        core = k8s.CoreV1Api(self._cp.api_client())
        # The rotator fills a Secret it expects to exist: their installs create it empty
        # (a kustomize secretGenerator in each one's overlays).
        try:
            core.create_namespaced_secret(self._namespace, {"metadata": {"name": self._secret}})
        except ApiException as err:
            if err.status != 409:
                raise
        cert_dir = _fresh_cert_dir(work)
        argv = [
            str(self._tool.binary),
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            f"--webhook-server-port={webhook_port}",
            "--leader-elect=false",
            *self._extra_args,
        ]

        def mount_secret() -> None:
            if not (cert_dir / "tls.crt").is_file():
                _mount_secret(core, self._namespace, self._secret, cert_dir)

        return _Launch(_with_cert_dir(argv, cert_dir), str(info.kubeconfig), mount_secret)


def training_operator(
    control_plane: ControlPlane, operator: ResolvedTool
) -> RotatingCertController:
    """The training operator with only its PyTorchJob controller (and only that CRD)."""
    return RotatingCertController(
        control_plane,
        operator,
        namespace=TRAINING_OPERATOR_NAMESPACE,
        secret="training-operator-webhook-cert",
        extra_args=("--enable-scheme=pytorchjob",),
        crd_kinds=(PYTORCHJOBS,),
    )


class TrainerManager(_ControllerProcess):
    """Kubeflow Trainer (TrainJob) plus its webhook registrations. JobSet's CRDs must be
    installed first: its runtime builds JobSets, and it watches them."""

    title = "Trainer"
    webhooks = OwnWebhooks(
        "manifests/base/webhook/manifests.yaml", "trainer", frozenset({"trainer.kubeflow.org"})
    )

    def __init__(self, control_plane: ControlPlane, trainer_tool: ResolvedTool) -> None:
        super().__init__(control_plane, trainer_tool, TRAINER_NAMESPACE)

    def crds(self) -> list[dict[str, Any]]:
        return trainer_crds(self._tool)

    def _launch(self, info: ControlPlaneInfo, work: Path, webhook_port: int) -> _Launch:
        cert_dir = _fresh_cert_dir(work)
        self._cp.ca.serving("127.0.0.1", "localhost").write(cert_dir, "tls.crt", "tls.key")
        config = _manager_configuration(
            "config.trainer.kubeflow.org/v1alpha1",
            self.health_port,
            {"port": webhook_port, "host": "127.0.0.1"},
            certManagement={"enable": False},
        )
        config_file = work / "config.yaml"
        config_file.write_text(config)
        argv = [str(self._tool.binary), f"--config={config_file}", "--zap-log-level=info"]
        return _Launch(_with_cert_dir(argv, cert_dir), str(info.kubeconfig))


def trainer(control_plane: ControlPlane, trainer_tool: ResolvedTool) -> TrainerManager:
    return TrainerManager(control_plane, trainer_tool)


@dataclass
class TrainingControllers:
    """The three controllers as the embedded default runs them, and what each cost to start.

    `install_crds` goes before Kueue starts (so its integrations find their APIs at once);
    `start` after it: JobSet first (Trainer's runtime makes JobSets), then the training
    operator, then Trainer and the `TORCH_RUNTIME` ClusterTrainingRuntime."""

    control_plane: ControlPlane
    tools: Mapping[str, ResolvedTool]
    jobset: JobSetManager | None = None
    training_operator: RotatingCertController | None = None
    trainer: TrainerManager | None = None
    mpi_operator: MPIOperator | None = None
    # Seconds from launch to ready (its /readyz, and its webhooks registered), by tool name.
    start_seconds: dict[str, float] = field(default_factory=dict)

    def install_crds(self) -> list[str]:
        return self.control_plane.install_crds(training_crds(self.tools))

    def start(self) -> None:
        cp = self.control_plane
        self.jobset = JobSetManager(cp, self.tools["jobset"])
        self.training_operator = training_operator(cp, self.tools["training-operator"])
        self.trainer = TrainerManager(cp, self.tools["trainer"])
        self.mpi_operator = MPIOperator(cp, self.tools["mpi-operator"])
        for part in (self.jobset, self.training_operator, self.trainer, self.mpi_operator):
            started = time.monotonic()
            part.start()
            self.start_seconds[part.name] = time.monotonic() - started
        install_cluster_training_runtime(cp.api_client(), torch_runtime())

    def stop(self) -> None:
        for part in (self.mpi_operator, self.trainer, self.training_operator, self.jobset):
            if part is not None:
                part.stop()

    def processes(self) -> dict[str, Supervised]:
        parts = (self.jobset, self.training_operator, self.trainer, self.mpi_operator)
        return {p.name: p.process for p in parts if p is not None and p.process is not None}

    def rss_kib(self) -> dict[str, int]:
        """Each controller's resident memory now (VmRSS), by tool name."""
        return {
            name: sum(_rss_kib(pid) for pid in (proc.pid, *descendants(proc.pid)))
            for name, proc in self.processes().items()
        }


def install_cluster_training_runtime(api: k8s.ApiClient, runtime: dict[str, Any]) -> None:
    """Create (or replace) a ClusterTrainingRuntime; Trainer's webhook validates it."""
    custom = k8s.CustomObjectsApi(api)
    args = ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
    try:
        custom.create_cluster_custom_object(*args, runtime)
    except ApiException as err:
        if err.status != 409:
            raise
        current = custom.get_cluster_custom_object(*args, runtime["metadata"]["name"])
        body = copy.deepcopy(runtime)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        custom.replace_cluster_custom_object(*args, runtime["metadata"]["name"], body)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _mount_secret(core: k8s.CoreV1Api, namespace: str, name: str, target: Path) -> None:
    """Write the Secret's keys as files, once it exists (the rotator creates it on start)."""
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return
        raise
    data = secret.data or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return
    for key, value in sorted(data.items(), key=lambda item: item[0] == "tls.crt"):
        # tls.crt last: the rotator takes its presence to mean the files are complete.
        (target / key).write_bytes(base64.b64decode(value))


def _manager_configuration(
    api_version: str, health_port: int, webhook: dict[str, Any], **own: Any
) -> str:
    """A controller-runtime manager's configuration file, as JobSet and Trainer read it:
    probes on 127.0.0.1, no metrics, no leader election; `own` adds its certificate switch."""
    return yaml.safe_dump(
        {
            "apiVersion": api_version,
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": webhook,
            "leaderElection": {"leaderElect": False},
            **own,
        }
    )


def _fresh_cert_dir(work: Path) -> Path:
    """An empty directory to be the process's fixed certificate directory (`_with_cert_dir`)."""
    cert_dir = work / "serving-certs"
    if cert_dir.exists():
        shutil.rmtree(cert_dir)
    cert_dir.mkdir(parents=True)
    return cert_dir


def _with_cert_dir(argv: list[str], cert_dir: Path) -> list[str]:
    """Run argv with `cert_dir` mounted on the fixed certificate path, in a private mount
    namespace (a user namespace too for a non-root user), so that path is this process's
    alone. Only that path: a private /tmp hid a tool cache kept under /tmp, and the binary
    itself with it."""
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare += ["--user", "--map-root-user"]
    script = 'set -e; mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; exec "$@"'
    return [*unshare, "sh", "-c", script, "with-cert-dir", str(cert_dir), _FIXED_CERT_DIR, *argv]
