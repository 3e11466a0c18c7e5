"""The simulated world runs JobSet, PyTorchJob and TrainJob gangs under their real controllers.

With the real Kueue manager (a ClusterQueue WITHOUT our admission check: plain Kueue, no
product controller), the real JobSet controller, training operator and Trainer, and the Job
and Pod simulators (`devenv.jobsim`, `devenv.podsim`) standing in for the Job controller,
scheduler and kubelet: on four Nodes labelled and tainted as one pool (beside a NotReady
Node of that pool and a Ready Node of another), a JobSet (leader 1 + workers 3), a
PyTorchJob (Master 1 + Worker 3) and a TrainJob (numNodes 4) each run to completion, marked
so by its own controller, and Kueue finishes its Workload. Kueue pins the Pods to the pool
through the ResourceFlavor's nodeLabels and tolerations, as a plain install would. Every
Pod of each is bound to a distinct one of the four Nodes. A Pod pinned to a pool no Node
carries stays unbound while one pinned to the pool is placed beside it.

It lives with the e2e tests because it runs the Kueue manager, which must come last in a
session (tests/conftest.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.jobsim import JobSimulator
from devenv.podsim import PodSimulator
from provisioner.api import constants as c
from provisioner.api import kueue_objects as kobj
from tests.support import gang_kinds
from tests.support.waiting import eventually

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
GROUP = "g1"
RUN_SECONDS = 1.5


@pytest.fixture
def world(
    control_plane: Any, kueue: Any, training_controllers: Any, namespace: str
) -> Iterator[dict[str, Any]]:
    api = control_plane.api_client()
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    pool = f"kinds-{uuid.uuid4().hex[:6]}"
    taint = {"key": c.GANG_TAINT_KEY, "value": pool, "effect": "NoSchedule"}
    members = [f"{pool}-n{i}" for i in range(4)]
    nodes = {name: (pool, True) for name in members}
    nodes[f"{pool}-notready"] = (pool, False)
    nodes[f"{pool}-other"] = (f"{pool}-other", True)
    for name, (node_pool, ready) in nodes.items():
        core.create_node(
            {
                "metadata": {
                    "name": name,
                    "labels": {c.POOL_LABEL: node_pool, c.GROUP_LABEL: GROUP},
                },
                "status": {
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                },
            }
        )
        # The apiserver taints a new Node not-ready; the node lifecycle controller (absent
        # here) would lift it. The pool's own taint replaces it, as nodeadm registers it.
        core.patch_node(name, {"spec": {"taints": [{**taint, "value": node_pool}]}})
    flavor, queue = f"{pool}-flavor", f"{pool}-cq"
    toleration = {
        "key": c.GANG_TAINT_KEY,
        "operator": "Equal",
        "value": pool,
        "effect": "NoSchedule",
    }
    objects = [
        (
            "resourceflavors",
            {
                "apiVersion": kobj.KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {c.POOL_LABEL: pool}, "tolerations": [toleration]},
            },
        ),
        (
            "clusterqueues",
            kobj.cluster_queue(
                queue,
                flavor,
                None,  # plain Kueue: no admission check
                {"cpu": "16", "memory": "64Gi"},
                {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            ),
        ),
    ]
    for plural, body in objects:
        custom.create_cluster_custom_object(*KUEUE, plural, body)
    custom.create_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", kobj.local_queue(namespace, "plain", queue)
    )
    jobs = JobSimulator(api, RUN_SECONDS, poll_interval=0.3, pods=True)
    pods = PodSimulator(api, RUN_SECONDS, poll_interval=0.3)
    jobs.start()
    pods.start()
    yield {"api": api, "pool": pool, "members": set(members), "queue": "plain"}
    pods.stop()
    jobs.stop()
    for group, version, plural in gang_kinds.GANG_KINDS:
        custom.delete_collection_namespaced_custom_object(group, version, namespace, plural)
    for name in nodes:
        core.delete_node(name)
    custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", flavor)


def _workload(api: Any, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    items = k8s.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE, namespace, "workloads")[
        "items"
    ]
    for wl in items:
        refs = wl["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == kind and r.get("name") == name for r in refs):
            return dict(wl)
    return None


def _runs_on_the_pool(
    world: dict[str, Any], namespace: str, body: dict[str, Any], done: str
) -> list[Any]:
    api, kind, name = world["api"], body["kind"], body["metadata"]["name"]
    gang_kinds.create(api, body)
    # Its own controller marks it done (JobSet: Completed; PyTorchJob: Succeeded; TrainJob:
    # Complete), which it does only once every Job or Pod under it has succeeded.
    eventually(
        lambda: gang_kinds.condition(gang_kinds.get(api, kind, namespace, name), done) == "True",
        180,
        f"the {kind} marked {done} by its controller",
    )
    finished = eventually(
        lambda: (
            gang_kinds.condition(_workload(api, namespace, kind, name) or {}, "Finished") == "True"
        ),
        60,
        f"Kueue finishing the {kind}'s Workload",
    )
    assert finished
    pods = gang_kinds.gang_pods(api, namespace, kind, name)
    placed = sorted(p.spec.node_name for p in pods)
    assert len(pods) == 4, [p.metadata.name for p in pods]
    assert len(set(placed)) == 4 and set(placed) == world["members"], placed
    # A JobSet's (and so a TrainJob's) Jobs complete only once every Pod has succeeded; the
    # training operator marks a PyTorchJob Succeeded once its Master has, workers may still run.
    every = kind != "PyTorchJob"
    for pod in pods:
        phases = ("Succeeded",) if every else ("Running", "Succeeded")
        assert pod.status.phase in phases, (pod.metadata.name, pod.status.phase)
        # Kueue's ResourceFlavor pinned the Pod; the placement honoured it.
        assert pod.spec.node_selector.get(c.POOL_LABEL) == world["pool"], pod.spec.node_selector
    return pods


def test_each_kind_runs_to_completion_one_pod_per_pool_node(
    world: dict[str, Any], namespace: str
) -> None:
    queue = world["queue"]
    jobset_pods = _runs_on_the_pool(
        world, namespace, gang_kinds.jobset(namespace, "js", queue, None), "Completed"
    )
    # Both replicated jobs' Pods are among them: 1 leader, 3 workers (Indexed 0..2).
    jobs = sorted(p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] for p in jobset_pods)
    assert jobs == ["leader", "workers", "workers", "workers"]

    pytorch_pods = _runs_on_the_pool(
        world, namespace, gang_kinds.pytorchjob(namespace, "pt", queue, None), "Succeeded"
    )
    roles = sorted(p.metadata.labels["training.kubeflow.org/replica-type"] for p in pytorch_pods)
    assert roles == ["master", "worker", "worker", "worker"]

    train_pods = _runs_on_the_pool(
        world, namespace, gang_kinds.trainjob(namespace, "tj", queue, None), "Complete"
    )
    steps = {p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] for p in train_pods}
    assert steps == {"node"}


def test_a_pod_pinned_to_a_pool_no_node_carries_stays_unbound(
    world: dict[str, Any], namespace: str
) -> None:
    core = k8s.CoreV1Api(world["api"])

    def bare_pod(name: str, pool: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {c.POOL_LABEL: pool},
                "tolerations": [{"key": c.GANG_TAINT_KEY, "operator": "Exists"}],
                "containers": [{"name": "c", "image": gang_kinds.IMAGE}],
            },
        }

    core.create_namespaced_pod(namespace, bare_pod("nowhere", "no-such-pool"))
    core.create_namespaced_pod(namespace, bare_pod("here", world["pool"]))
    # The placement is running: the pool's Pod is bound (and started) meanwhile.
    eventually(
        lambda: core.read_namespaced_pod("here", namespace).spec.node_name in world["members"],
        30,
        "the pool's Pod bound to a member Node",
    )
    eventually(
        lambda: core.read_namespaced_pod("here", namespace).status.phase == "Running",
        30,
        "the pool's Pod started",
    )
    stray = core.read_namespaced_pod("nowhere", namespace)
    assert stray.spec.node_name is None and stray.status.phase == "Pending"
