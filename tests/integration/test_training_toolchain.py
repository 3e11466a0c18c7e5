"""The training-job controllers we build run against the local control plane and do their job.

What gang jobs beyond batch/v1 Job run under: the JobSet controller (v0.12.0), Kubeflow's
training operator (v1.9.3, PyTorchJob) and Kubeflow Trainer (v2.2.1, TrainJob, which runs
on JobSet), the versions Kueue 0.19.2 is built against, each built from its Go module
(`versions.py`, `TRAINING_TOOLS`) with the CRDs of the same module installed. Each test
shows a controller ready (its /readyz) and reconciling a trivial object, through its own
webhooks where it has them registered (JobSet's, Trainer's), into the children it owns.
Nothing here runs Jobs or Pods (no kube-controller-manager or kubelet, and no simulator in
this file), so they are created but never run.

They are in `make tools`' default set; a run without them builds any that are missing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv import training_controllers as tc

pytestmark = pytest.mark.timeout(3600)  # a first run builds the missing controllers


def _wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout:.0f}s (last: {last!r})")


def _running(manager: Any) -> Iterator[Any]:
    """The controller with its own CRDs installed (devenv's, as the embedded default
    installs them), started, and stopped after the module."""
    manager.install_crds()
    manager.start()
    yield manager
    manager.stop()


@pytest.fixture(scope="module")
def jobset_manager(control_plane: Any, tools: Any) -> Iterator[tc.JobSetManager]:
    yield from _running(tc.JobSetManager(control_plane, tools["jobset"]))


@pytest.fixture(scope="module")
def training_operator(control_plane: Any, tools: Any) -> Iterator[tc.RotatingCertController]:
    yield from _running(tc.training_operator(control_plane, tools["training-operator"]))


@pytest.fixture(scope="module")
def trainer(
    control_plane: Any, tools: Any, jobset_manager: tc.JobSetManager
) -> Iterator[tc.TrainerManager]:
    yield from _running(tc.trainer(control_plane, tools["trainer"]))


def _owned_by(obj: Any, kind: str, name: str) -> bool:
    refs = obj.metadata.owner_references or []
    return any(ref.kind == kind and ref.name == name and ref.controller for ref in refs)


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": "registry.invalid/none:1", "command": ["true"]}


def test_jobset_controller_creates_one_job_per_replica_through_its_webhooks(
    kube_api: Any, namespace: str, jobset_manager: tc.JobSetManager
) -> None:
    assert jobset_manager.process is not None and jobset_manager.process.alive()
    custom = k8s.CustomObjectsApi(kube_api)
    name = f"js-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [_container("worker")],
                                }
                            }
                        }
                    },
                }
            ]
        },
    }
    created = custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", body
    )
    # The defaulting webhook (registered at 127.0.0.1 with our CA) filled what we left out.
    assert created["spec"]["successPolicy"]["operator"] == "All"
    assert created["spec"]["network"]["enableDNSHostnames"] is True

    batch = k8s.BatchV1Api(kube_api)

    def children() -> list[str]:
        jobs = batch.list_namespaced_job(namespace).items
        return sorted(j.metadata.name for j in jobs if _owned_by(j, "JobSet", name))

    assert _wait_for("JobSet's child Jobs", lambda: len(children()) == 2 and children())
    assert children() == [f"{name}-workers-0", f"{name}-workers-1"]
    # JobSet's headless Service for pod hostnames, also its own.
    service = k8s.CoreV1Api(kube_api).read_namespaced_service(name, namespace)
    assert _owned_by(service, "JobSet", name)

    # The validating webhook answers too: a replicated job name that would make an invalid
    # Job name is refused before it is stored.
    bad = {**body, "metadata": {"name": f"{name}-bad"}}
    bad["spec"] = {
        **body["spec"],
        "replicatedJobs": [{**body["spec"]["replicatedJobs"][0], "name": "Not_A_DNS_Label"}],
    }
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", bad
        )
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "vjobset.kb.io" denied'), message


def test_training_operator_creates_the_pods_and_services_of_a_pytorchjob(
    kube_api: Any, namespace: str, training_operator: tc.RotatingCertController
) -> None:
    assert training_operator.process is not None and training_operator.process.alive()
    name = f"pt-{uuid.uuid4().hex[:6]}"
    replica = {
        "replicas": 1,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [_container("pytorch")]}},
    }
    k8s.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        namespace,
        "pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
        },
    )
    core = k8s.CoreV1Api(kube_api)

    def pods() -> list[str]:
        listed = core.list_namespaced_pod(namespace).items
        return sorted(p.metadata.name for p in listed if _owned_by(p, "PyTorchJob", name))

    assert _wait_for("PyTorchJob's pods", lambda: len(pods()) == 2 and pods())
    assert pods() == [f"{name}-master-0", f"{name}-worker-0"]
    master = core.read_namespaced_pod(f"{name}-master-0", namespace)
    env = {e.name: e.value for e in master.spec.containers[0].env or []}
    # The operator wires the torch rendezvous: a master address and a world of two.
    assert env.get("MASTER_ADDR") == f"{name}-master-0" and env.get("WORLD_SIZE") == "2", env
    service = core.read_namespaced_service(f"{name}-master-0", namespace)
    assert _owned_by(service, "PyTorchJob", name)


def test_trainer_turns_a_trainjob_into_a_jobset_that_jobset_runs(
    kube_api: Any,
    namespace: str,
    trainer: tc.TrainerManager,
    jobset_manager: tc.JobSetManager,
) -> None:
    assert trainer.process is not None and trainer.process.alive()
    custom = k8s.CustomObjectsApi(kube_api)
    runtime = "tiny-torch"
    custom.create_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        namespace,
        "trainingruntimes",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {"name": runtime},
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
                                            "trainer.kubeflow.org/trainjob-ancestor-step": (
                                                "trainer"
                                            )
                                        }
                                    },
                                    "spec": {
                                        "template": {"spec": {"containers": [_container("node")]}}
                                    },
                                },
                            }
                        ]
                    }
                },
            },
        },
    )
    name = f"tj-{uuid.uuid4().hex[:6]}"
    custom.create_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        namespace,
        "trainjobs",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {
                "runtimeRef": {"name": runtime, "kind": "TrainingRuntime"},
                "trainer": {"numNodes": 2},
            },
        },
    )

    def jobset() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    built = _wait_for("the TrainJob's JobSet", jobset)
    owners = built["metadata"].get("ownerReferences", [])
    assert any(o["kind"] == "TrainJob" and o["name"] == name for o in owners), owners
    (node,) = built["spec"]["replicatedJobs"]
    # The TrainJob's numNodes overrides the runtime's: two pods in the node job.
    assert node["template"]["spec"]["parallelism"] == 2, node

    batch = k8s.BatchV1Api(kube_api)
    job = _wait_for(
        "the JobSet controller's Job for the TrainJob",
        lambda: [
            j for j in batch.list_namespaced_job(namespace).items if _owned_by(j, "JobSet", name)
        ],
    )
    assert [j.metadata.name for j in job] == [f"{name}-node-0"]
