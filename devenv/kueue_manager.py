"""The real Kueue manager, run as a local process against the local control plane.

Used by the e2e fixtures and `atomic-gang dev up`. The manager, its CRDs and its webhook
manifests all come from the same Kueue module build (see `versions.py`). The manager's
configuration is also published as the `kueue-manager-config` ConfigMap an install has (the
manager reads the file; the ConfigMap is what tools such as doctor read). In a cluster the
webhooks are reached through a Service; here there is no Service network, so each webhook's
clientConfig is rewritten to a URL on 127.0.0.1 with our CA as caBundle, and the manager
serves with a certificate that CA signed.

Kueue's waitForPodsReady is a knob (`wait_for_pods_ready`): its Configuration block, on by
default with `DEFAULT_WAIT_FOR_PODS_READY`, or None for off (the DisableWaitForPodsReady
feature gate, the only way to turn it off from config v1beta2). `restart` applies another
setting to a running manager, for the tests of a gang whose pods never start.
"""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.controller_webhooks import OwnWebhooks, Webhooks, hooks_served
from devenv.controlplane import ControlPlane, ensure_namespace, http_ok, load_yaml_documents
from devenv.processes import Supervised, free_port
from provisioner.toolchain.installer import ResolvedTool

KUEUE_NAMESPACE = "kueue-system"
# Where Kueue's own install keeps the manager's configuration (its kustomize ConfigMap,
# mounted into the manager's pod); published here too so tools read it as from an install.
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
# The job frameworks Kueue's integrations manage here, as its configuration names them: the
# kinds gang jobs are submitted as. Each needs its API served before Kueue can set up its
# controller (Kueue defers one whose CRD is missing and polls for it), so the environment
# installs the training controllers' CRDs before Kueue starts. From Kueue 0.19.2's source:
# the TrainJob integration also watches the JobSets a TrainJob owns and reads Trainer's
# (Cluster)TrainingRuntimes to compute its pod sets, so it needs JobSet's and Trainer's
# CRDs; none of the five names another framework as a dependency.
FRAMEWORKS = (
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
    "kubeflow.org/mpijob",
)
# Kueue's webhooks registered here: its own objects' and the five frameworks' kinds, kept
# off the system namespaces as its own install keeps them. Every other hook in its manifests
# is left out: fail-closed, in front of kinds nothing here runs.
KUEUE_WEBHOOKS: Final = OwnWebhooks(
    "config/components/webhook/manifests.yaml",
    "kueue",
    groups=frozenset({"kueue.x-k8s.io"}),
    resources=frozenset(
        {
            ("batch", "jobs"),
            ("jobset.x-k8s.io", "jobsets"),
            ("kubeflow.org", "pytorchjobs"),
            ("trainer.kubeflow.org", "trainjobs"),
            ("kubeflow.org", "mpijobs"),
        }
    ),
    skip_namespaces=("kube-system", KUEUE_NAMESPACE),
)
# Gang semantics: Kueue holds a workload until all its pods are ready, as the reference
# requires of production installs; 10 minutes from admission covers a gang's pods being
# placed and pulling a large training image (docs/GANG-NODES.md has the reasoning).
DEFAULT_WAIT_FOR_PODS_READY: Final = {"timeout": "10m", "blockAdmission": False}
DISABLE_WAIT_FOR_PODS_READY: Final = "DisableWaitForPodsReady"


def kueue_crds(kueue: ResolvedTool) -> list[dict[str, Any]]:
    """Kueue's CRDs from the module that built the manager, conversion left at None.

    v1beta2 is the storage version and the only one this project and the manager use, so
    the CRDs need no conversion webhook (which would tie every read to the manager's life).
    """
    docs = load_yaml_documents(sorted(kueue.asset("config/components/crd/bases").glob("*.yaml")))
    for doc in docs:
        doc["spec"].pop("conversion", None)
    return docs


def _manager_config(
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    wait_for_pods_ready: dict[str, Any] | None = DEFAULT_WAIT_FOR_PODS_READY,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "clientConnection": {"qps": 100, "burst": 200},
        # In the config, not on the command line: Kueue refuses gates set in both. The
        # visibility API server would need an APIService and a fixed port.
        "featureGates": {"VisibilityOnDemand": False},
    }
    if wait_for_pods_ready is None:
        config["featureGates"][DISABLE_WAIT_FOR_PODS_READY] = True
    else:
        config["waitForPodsReady"] = dict(wait_for_pods_ready)
    return config


class KueueManager:
    """One Kueue manager process plus its webhook registrations."""

    def __init__(
        self,
        control_plane: ControlPlane,
        kueue: ResolvedTool,
        wait_for_pods_ready: dict[str, Any] | None = DEFAULT_WAIT_FOR_PODS_READY,
    ) -> None:
        self._cp = control_plane
        self._tool = kueue
        self.wait_for_pods_ready = wait_for_pods_ready
        self._proc: Supervised | None = None
        self._webhooks = Webhooks(control_plane, KUEUE_WEBHOOKS)
        self.webhook_port = 0

    def install_crds(self) -> list[str]:
        return self._cp.install_crds(kueue_crds(self._tool))

    def start(self) -> None:
        info = self._cp.info
        assert info is not None, "start the control plane first"
        api = self._cp.api_client()
        ensure_namespace(api, KUEUE_NAMESPACE)
        work = info.work_dir / "kueue"
        cert_dir = work / "certs"
        self._cp.ca.serving("127.0.0.1", "localhost").write(cert_dir, "tls.crt", "tls.key")
        self.webhook_port, health_port = free_port(), free_port()
        config_path = work / "config.yaml"
        config = _manager_config(self.webhook_port, health_port, cert_dir, self.wait_for_pods_ready)
        config_text = yaml.safe_dump(config)
        config_path.write_text(config_text)
        _publish_config(api, config_text)
        env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}
        manager = [
            str(self._tool.binary),
            f"--config={config_path}",
            "--zap-log-level=info",
        ]
        self._proc = Supervised(
            "kueue-manager",
            _with_metrics_certs(manager, cert_dir, work),
            info.work_dir / "logs" / "kueue-manager.log",
            env=env,
        )
        self._proc.wait_ready(
            lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"), 90, "Kueue /readyz"
        )
        docs = self._webhooks.configurations(self._tool, self.webhook_port, info.ca_pem)
        context = ssl.create_default_context(cadata=info.ca_pem.decode())
        self._proc.wait_ready(lambda: hooks_served(docs, context), 60, "Kueue webhook handlers")
        # Not taken away on stop: a Job made while Kueue restarts is refused (fail closed),
        # as in a cluster whose Kueue is down.
        self._webhooks.register(docs)

    def restart(self, wait_for_pods_ready: dict[str, Any] | None) -> None:
        """Stop the manager and start it again with this waitForPodsReady (None: off)."""
        self.stop()
        self.wait_for_pods_ready = wait_for_pods_ready
        self.start()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    @property
    def process(self) -> Supervised | None:
        return self._proc


# With its own certificate management off, the manager reads metrics certificates from this
# fixed path and exits if they are missing; the path is not configurable.
_METRICS_CERT_PATH = "/etc/kueue/metrics/certs"


def _with_metrics_certs(argv: list[str], cert_dir: Path, work: Path) -> list[str]:
    """Run the manager where `_METRICS_CERT_PATH` holds our certificate, /etc untouched.

    The manager runs in a private mount namespace whose /etc is an overlay of the real one
    plus that directory, so nothing is written to the machine's /etc and nothing is left
    behind. A non-root user gets the namespace through a user namespace.
    """
    upper, scratch = work / "etc-upper", work / "etc-work"
    for path in (upper, scratch):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    script = (
        'set -e; mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc; '
        'mkdir -p "$3"; cp "$4/tls.crt" "$4/tls.key" "$3/"; shift 4; exec "$@"'
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare += ["--user", "--map-root-user"]
    return [
        *unshare,
        "sh",
        "-c",
        script,
        "kueue-with-certs",
        str(upper),
        str(scratch),
        _METRICS_CERT_PATH,
        str(cert_dir),
        *argv,
    ]


def _publish_config(api: k8s.ApiClient, text: str) -> None:
    """The configuration the manager reads, as the ConfigMap an install mounts it from."""
    core = k8s.CoreV1Api(api)
    body = {
        "metadata": {"name": CONFIG_MAP, "namespace": KUEUE_NAMESPACE},
        "data": {CONFIG_KEY: text},
    }
    try:
        core.create_namespaced_config_map(KUEUE_NAMESPACE, body)
    except ApiException as err:
        if err.status != 409:
            raise
        core.replace_namespaced_config_map(CONFIG_MAP, KUEUE_NAMESPACE, body)
