"""The embedded default: a whole local installation in one object.

Used by `atomic-gang dev up` (through `daemon.py`), the demo and the e2e fixtures. It starts,
in order: the tools (built if missing), etcd + kube-apiserver, our CRD and Kueue's, the Kueue
manager, the EC2 emulator with an EKS cluster record pointing at the local apiserver, and
the node simulator; `stop()` ends all of them. `state()` is what `dev status` prints.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from kubernetes import client as k8s

from provisioner.api.gangnodepool import load_crd
from provisioner.devenv import tools as toolchain
from provisioner.devenv.controlplane import SERVICE_CIDR, ControlPlane
from provisioner.devenv.emulator import EmulatorClient, EmulatorProcess
from provisioner.devenv.kueue import KueueManager
from provisioner.devenv.nodesim import NodeSimulator

DEFAULT_CLUSTER = "atomic-gang-local"
DEFAULT_REGION = "us-east-1"


@dataclass
class LocalEnvironment:
    work_dir: Path
    cluster_name: str = DEFAULT_CLUSTER
    region: str = DEFAULT_REGION
    with_kueue: bool = True
    join_delay: float = 2.0
    control_plane: ControlPlane | None = None
    kueue: KueueManager | None = None
    emulator: EmulatorProcess | None = None
    nodes: NodeSimulator | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def start(self) -> dict[str, Any]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        resolved = self._timed("tools", toolchain.ensure_all)
        self.control_plane = ControlPlane(
            self.work_dir / "control-plane", resolved["etcd"], resolved["kube-apiserver"]
        )
        info = self._timed("control plane", self.control_plane.start)
        self._timed("CRDs", lambda: self.control_plane.install_crds([load_crd()]))  # type: ignore[union-attr]
        if self.with_kueue:
            self.kueue = KueueManager(self.control_plane, resolved["kueue"])
            self._timed("Kueue CRDs", self.kueue.install_crds)
            self._timed("Kueue manager", self.kueue.start)
        self.emulator = EmulatorProcess(log_dir=self.work_dir / "logs")
        self._timed("EC2 emulator", self.emulator.start)
        EmulatorClient(self.emulator.endpoint_url).register_eks_cluster(
            name=self.cluster_name,
            endpoint=info.endpoint,
            certificate_authority_data=info.ca_base64,
            service_ipv4_cidr=SERVICE_CIDR,
        )
        self.nodes = NodeSimulator(
            core=k8s.CoreV1Api(self.control_plane.api_client()),
            ec2=self.ec2_client(),
            cluster_name=self.cluster_name,
            join_delay=self.join_delay,
        )
        self.nodes.start()
        return self.state()

    def ec2_client(self) -> Any:
        assert self.emulator is not None
        return boto3.client(
            "ec2",
            region_name=self.region,
            endpoint_url=self.emulator.endpoint_url,
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )

    def stop(self) -> None:
        if self.nodes is not None:
            self.nodes.stop()
        for part in (self.emulator, self.kueue, self.control_plane):
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
            "pid": os.getpid(),
            "startSeconds": {k: round(v, 2) for k, v in self.timings.items()},
        }

    def _timed(self, what: str, step: Any) -> Any:
        started = time.monotonic()
        result = step()
        self.timings[what] = time.monotonic() - started
        return result
