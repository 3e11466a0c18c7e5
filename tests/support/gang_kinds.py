"""Gangs as users submit them beyond batch/v1 Job: JobSet, PyTorchJob, TrainJob and MPIJob bodies,
and the Pods each one ends up as.

The pool label and the gang annotations go on the top-level object, as on a Job
(`devenv.kueue_objects.gang_job`); `pool=None` leaves the pool label off (a plain-Kueue
test pins Pods through its ResourceFlavor's nodeLabels instead). Each body asks for
`cpu: 1, memory: 1Gi` per Pod, as the gang Job does.

`gang_pods` follows ownership down from the top-level object (TrainJob -> JobSet -> Job ->
Pod; JobSet -> Job -> Pod; PyTorchJob -> Pod; MPIJob -> launcher Job -> Pod and MPIJob -> worker
Pod; Job -> Pod), so a test sees every Pod a gang
ran as, wherever it was placed.
"""

from __future__ import annotations

from typing import Any, Final

from kubernetes import client as k8s

from devenv.training_crds import TORCH_RUNTIME
from provisioner.api import constants as c

IMAGE: Final = "registry.local/trainer:latest"
REQUESTS: Final = {"cpu": "1", "memory": "1Gi"}

JOBSETS: Final = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PYTORCHJOBS: Final = ("kubeflow.org", "v1", "pytorchjobs")
TRAINJOBS: Final = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
MPIJOBS: Final = ("kubeflow.org", "v2beta1", "mpijobs")
# (group, version, plural) of the four kinds, for creating, listing and cleaning up.
GANG_KINDS: Final = (JOBSETS, PYTORCHJOBS, TRAINJOBS, MPIJOBS)
_BY_KIND: Final = {
    "JobSet": JOBSETS,
    "PyTorchJob": PYTORCHJOBS,
    "TrainJob": TRAINJOBS,
    "MPIJob": MPIJOBS,
}


def _metadata(
    namespace: str,
    name: str,
    queue: str,
    pool: str | None,
    count: int,
    annotations: dict[str, str] | None,
) -> dict[str, Any]:
    labels = {c.QUEUE_NAME_LABEL: queue}
    if pool is not None:
        labels[c.POOL_LABEL] = pool
    gang = {c.ANN_COUNT: str(count), c.ANN_INSTANCE_TYPE: "m5.large"} if pool else {}
    return {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {**gang, **(annotations or {})},
    }


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": {"requests": dict(REQUESTS)}}


def _job_template(pods: int, *, indexed: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [_container("trainer")]}},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"spec": spec}


def _replicated(name: str, template: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": template}


def jobset(
    namespace: str,
    name: str,
    queue: str,
    pool: str | None,
    *,
    leaders: int = 1,
    workers: int = 3,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JobSet of two replicated jobs, `leader` (one Job of `leaders` Pods) and `workers`
    (one Indexed Job of `workers` Pods); its gang is leaders + workers Pods."""
    count = leaders + workers
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(namespace, name, queue, pool, count, annotations),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "leader",
                    "replicas": 1,
                    "template": _job_template(leaders, indexed=False),
                },
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": _job_template(workers, indexed=True),
                },
            ]
        },
    }


def pytorchjob(
    namespace: str,
    name: str,
    queue: str,
    pool: str | None,
    *,
    workers: int = 3,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob of one Master and `workers` Workers (its container named `pytorch`, as
    the training operator requires); its gang is 1 + workers Pods."""

    def replicas(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [_container("pytorch")]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(namespace, name, queue, pool, 1 + workers, annotations),
        "spec": {"pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)}},
    }


def mpijob(
    namespace: str,
    name: str,
    queue: str,
    pool: str | None,
    *,
    workers: int = 3,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An MPIJob (mpi-operator v2) of one Launcher and `workers` Workers; its gang is
    1 + workers Pods, the launcher on a gang node like each worker."""

    def replicas(n: int, container: str) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [_container(container)]}},
        }

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _metadata(namespace, name, queue, pool, 1 + workers, annotations),
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": replicas(1, "launcher"),
                "Worker": replicas(workers, "worker"),
            },
        },
    }


def trainjob(
    namespace: str,
    name: str,
    queue: str,
    pool: str | None,
    *,
    nodes: int = 4,
    runtime: str = TORCH_RUNTIME,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A TrainJob of `nodes` nodes on the ClusterTrainingRuntime `runtime` (the embedded
    default's: one replicated job `node`), so its gang is `nodes` Pods."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _metadata(namespace, name, queue, pool, nodes, annotations),
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": dict(REQUESTS)}},
        },
    }


def create(api: k8s.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    """Create a JobSet, PyTorchJob or TrainJob body (through every webhook on its kind)."""
    group, version, plural = _BY_KIND[body["kind"]]
    created: dict[str, Any] = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, body["metadata"]["namespace"], plural, body
    )
    return created


def get(api: k8s.ApiClient, kind: str, namespace: str, name: str) -> dict[str, Any]:
    group, version, plural = _BY_KIND[kind]
    found: dict[str, Any] = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, namespace, plural, name
    )
    return found


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None


def gang_pods(api: k8s.ApiClient, namespace: str, kind: str, name: str) -> list[Any]:
    """Every Pod (V1Pod) the top-level `kind`/`name` ran as, by following controller
    ownerReferences down from it."""
    custom = k8s.CustomObjectsApi(api)
    owners: set[tuple[str, str]] = {(kind, name)}
    if kind == "TrainJob":  # Trainer's JobSet
        for js in custom.list_namespaced_custom_object(*JOBSETS[:2], namespace, JOBSETS[2])[
            "items"
        ]:
            if _controlled_by(js["metadata"].get("ownerReferences"), owners):
                owners.add(("JobSet", js["metadata"]["name"]))
    for job in k8s.BatchV1Api(api).list_namespaced_job(namespace).items:
        refs = [r.to_dict() for r in job.metadata.owner_references or []]
        if _controlled_by(refs, owners):
            owners.add(("Job", job.metadata.name))
    pods = k8s.CoreV1Api(api).list_namespaced_pod(namespace).items
    return [
        p
        for p in pods
        if _controlled_by([r.to_dict() for r in p.metadata.owner_references or []], owners)
    ]


def _controlled_by(refs: list[dict[str, Any]] | None, owners: set[tuple[str, str]]) -> bool:
    return any(r.get("controller") and (r.get("kind"), r.get("name")) in owners for r in refs or [])
