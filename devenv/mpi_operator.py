"""Kubeflow's mpi-operator (v2: MPIJob, `kubeflow.org/v2beta1`) as a local process against the
local control plane, with the CRD of its own build (`versions.MPI_OPERATOR`).

Part of `training_controllers.TrainingControllers`: its CRD is installed with the others
before Kueue starts (Kueue's `kubeflow.org/mpijob` integration needs the API), the process
after. An MPIJob runs under it as upstream runs it: a launcher Job (which the Job simulator
runs, `jobsim.py`) and worker Pods (which the pod simulator places, `podsim.py`); the
MPIJob succeeds when its launcher Job completes.

Upstream binds its health endpoint to a fixed :8080; the build is patched
(`toolchain.patches.HEALTH_ADDRESS`) to take the address from the environment, so several
local environments on one machine each run their own. It serves no webhook. Its leader
election Lease lives in `MPI_OPERATOR_NAMESPACE`, as in its install.
"""

from __future__ import annotations

import os
from typing import Any

from devenv.controlplane import ControlPlane, ensure_namespace, http_ok
from devenv.processes import Supervised, free_port
from devenv.training_crds import mpi_operator_crds
from provisioner.toolchain.installer import ResolvedTool

MPI_OPERATOR_NAMESPACE = "mpi-operator"
_READY_TIMEOUT = 180.0


class MPIOperator:
    """One mpi-operator process: started once its CRD is served, ready once /healthz
    answers, stopped with the environment."""

    title = "mpi-operator"

    def __init__(self, control_plane: ControlPlane, tool: ResolvedTool) -> None:
        self._cp = control_plane
        self._tool = tool
        self._proc: Supervised | None = None

    @property
    def name(self) -> str:
        return self._tool.tool.name

    @property
    def process(self) -> Supervised | None:
        return self._proc

    def crds(self) -> list[dict[str, Any]]:
        return mpi_operator_crds()

    def start(self) -> None:
        info = self._cp.info
        assert info is not None, "start the control plane first"
        ensure_namespace(self._cp.api_client(), MPI_OPERATOR_NAMESPACE)
        health = f"127.0.0.1:{free_port()}"
        argv = [
            str(self._tool.binary),
            f"--lock-namespace={MPI_OPERATOR_NAMESPACE}",
            # Upstream's 5 QPS would make a gang's launcher wait on client throttling.
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ]
        env = {
            **os.environ,
            "KUBECONFIG": str(info.kubeconfig),
            "MPI_OPERATOR_HEALTH_ADDRESS": health,
        }
        self._proc = Supervised(
            self.name, argv, info.work_dir / "logs" / f"{self.name}.log", env=env
        )
        self._proc.wait_ready(
            lambda: http_ok(f"http://{health}/healthz"), _READY_TIMEOUT, "mpi-operator /healthz"
        )

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
