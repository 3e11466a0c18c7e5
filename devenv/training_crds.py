"""What the training-job controllers serve here (`training_controllers` runs them): the CRDs
of each one's own build, and the ClusterTrainingRuntime TrainJobs name."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devenv.controlplane import load_yaml_documents
from provisioner.toolchain.installer import ResolvedTool
from provisioner.toolchain.versions import MPI_OPERATOR

# The training operator runs only its PyTorchJob controller (`--enable-scheme`), so only that
# CRD of its six is installed.
PYTORCHJOBS = "pytorchjobs"

# The ClusterTrainingRuntime TrainJobs name here (`runtimeRef`): Trainer's own
# torch-distributed runtime cut to its trainer step, a JobSet of one replicated job `node`
# (no dataset or model initializer jobs), so a TrainJob of `numNodes: N` is N pods, in one
# pod set named `node`. Its container is named `node` too: Trainer's torch plugin finds the
# trainer container by that name.
TORCH_RUNTIME = "atomic-gang-torch"


def torch_runtime(image: str = "registry.local/trainer:latest") -> dict[str, Any]:
    """The ClusterTrainingRuntime `TORCH_RUNTIME` (Trainer v2.2.1's v1alpha1 API)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": TORCH_RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "image": image,
                                                    "command": ["torchrun", "train.py"],
                                                }
                                            ],
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def jobset_crds(jobset: ResolvedTool) -> list[dict[str, Any]]:
    return load_yaml_documents(sorted(jobset.asset("config/components/crd/bases").glob("*.yaml")))


def training_operator_crds(operator: ResolvedTool, *kinds: str) -> list[dict[str, Any]]:
    """The training operator's CRDs, only those of `kinds` (plural names) when given."""
    paths = sorted(operator.asset("manifests/base/crds").glob("kubeflow.org_*.yaml"))
    if kinds:
        paths = [p for p in paths if p.stem.removeprefix("kubeflow.org_") in kinds]
    return load_yaml_documents(paths)


def trainer_crds(trainer: ResolvedTool) -> list[dict[str, Any]]:
    return load_yaml_documents(
        sorted(trainer.asset("manifests/base/crds").glob("trainer.kubeflow.org_*.yaml"))
    )


def mpi_operator_crds() -> list[dict[str, Any]]:
    """mpi-operator's MPIJob (v2beta1) CRD, from its module at the pinned release
    (`versions.MPI_OPERATOR`, its manifests' base), fetched through the Go module proxy as
    the tools are (installed before Kueue starts, whether or not the controller runs)."""
    fetched = f"{MPI_OPERATOR.module}@{MPI_OPERATOR.version}"
    done = subprocess.run(
        ["go", "mod", "download", "-json", fetched],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off", "GOTOOLCHAIN": "local"},
    )
    info = json.loads(done.stdout or "{}")
    if done.returncode != 0 or info.get("Error") or not info.get("Dir"):
        why = info.get("Error") or done.stderr.strip()
        raise RuntimeError(f"the Go module proxy did not serve {fetched}: {why}")
    return load_yaml_documents([Path(info["Dir"]) / "manifests/base/kubeflow.org_mpijobs.yaml"])


def training_crds(tools: Mapping[str, ResolvedTool]) -> list[dict[str, Any]]:
    """Every CRD the training controllers serve here: JobSet's, PyTorchJob's, Trainer's,
    mpi-operator's MPIJob."""
    return [
        *jobset_crds(tools["jobset"]),
        *training_operator_crds(tools["training-operator"], PYTORCHJOBS),
        *trainer_crds(tools["trainer"]),
        *mpi_operator_crds(),
    ]
