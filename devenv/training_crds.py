"""What the training-job controllers serve here (`training_controllers` runs them): the CRDs
of each one's own build, and the ClusterTrainingRuntime TrainJobs name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devenv.controlplane import load_yaml_documents
from provisioner.toolchain.installer import ResolvedTool

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


def training_crds(tools: Mapping[str, ResolvedTool]) -> list[dict[str, Any]]:
    """Every CRD the three controllers serve here: JobSet's, PyTorchJob's, Trainer's."""
    return [
        *jobset_crds(tools["jobset"]),
        *training_operator_crds(tools["training-operator"], PYTORCHJOBS),
        *trainer_crds(tools["trainer"]),
    ]
