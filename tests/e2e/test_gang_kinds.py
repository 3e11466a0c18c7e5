"""With the real Kueue manager, JobSet controller, training operator, Trainer and
mpi-operator, and our controller: gangs submitted as a JobSet, a PyTorchJob, a TrainJob or
an MPIJob, and a Workload of a kind we do not support.

The pool label and gang annotations are on the top-level object. Each gang of 4 Pods over
two pod sets (a JobSet's leader and workers, a PyTorchJob's Master and Workers, an MPIJob's
Launcher and Workers; a TrainJob's nodes) is held with 0 instances while EC2 (the emulator)
has no room for it, gets its 4 nodes all-or-nothing once it has, runs every Pod of every
pod set on them, and has its claim released once it completes. A Job of the same shape
then reuses the warm set a JobSet left. Each test makes its own environment on the
session's shared parts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api import kueue_objects as kobj
from provisioner.api.constants import Phase
from tests.e2e.conftest import (
    GNP,
    KUEUE,
    check_state,
    conditions,
    eventually,
    gang_pods,
    launched,
    phase,
    pool,
    submit,
    submit_jobset,
    submit_mpijob,
    submit_pytorchjob,
    submit_trainjob,
    workload_of,
)

INSTANCE_TYPE = "m5.large"  # what `tests.support.gang_kinds` bodies ask for
# The label mpi-operator puts on each Pod it makes: "launcher" or "worker".
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"


def _zones(env: LocalEnvironment) -> list[str]:
    return sorted({s["AvailabilityZone"] for s in env.ec2_client().describe_subnets()["Subnets"]})


def _events_on(env: LocalEnvironment, namespace: str, kind: str, name: str) -> list[Any]:
    core = k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    return [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.involved_object.kind == kind and e.involved_object.name == name
    ]


def _held_then_run(
    env: LocalEnvironment,
    namespace: str,
    kind: str,
    name: str,
    submit_gang: Callable[[str], Any],
    on_placed: Callable[[list[Any]], None] = lambda _pods: None,
) -> str:
    """Submit with EC2 short of the gang's type: held at 0 instances at every poll; then
    room for it: 4 nodes at once, every Pod on them, and the claim released once the gang
    completes. Returns the pool's name."""
    pool_name = f"{kind.lower()[:6]}-{uuid.uuid4().hex[:6]}"
    zones = _zones(env)
    for zone in zones:
        env.emulator_client.set_capacity(zone, INSTANCE_TYPE, 0)
    created = submit_gang(pool_name)
    uid = created["metadata"]["uid"]

    def shortfalls() -> int:
        status = (pool(env, pool_name) or {}).get("status") or {}
        assert launched(env, pool_name) == 0, "an instance was launched while EC2 was short"
        return int(status.get("consecutiveShortfalls") or 0)

    eventually(lambda: shortfalls() >= 1, 120, "a capacity shortfall")
    wl = workload_of(env, namespace, name, kind)
    assert wl is not None and check_state(wl) in (c.CheckState.PENDING, c.CheckState.RETRY)
    assert conditions(wl).get("Admitted") != "True"
    assert launched(env, pool_name) == 0
    # The hold is told to the object its user wrote (by uid), not only to the Workload.
    held = _events_on(env, namespace, kind, name)
    assert any(e.reason == "PoolCreated" and e.involved_object.uid == uid for e in held), held

    env.emulator_client.set_capacity(zones[0], INSTANCE_TYPE, 4)
    eventually(
        lambda: conditions(workload_of(env, namespace, name, kind)).get("Admitted") == "True",
        180,
        f"{kind} admitted after capacity freed",
    )
    assert launched(env, pool_name) == 4
    pool_nodes = {
        n.metadata.name
        for n in k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
        .list_node(label_selector=f"{c.POOL_LABEL}={pool_name}")
        .items
    }
    assert len(pool_nodes) == 4

    def all_placed() -> list[Any] | None:
        pods = gang_pods(env, namespace, kind, name)
        return pods if len(pods) == 4 and all(p.spec.node_name for p in pods) else None

    placed = eventually(all_placed, 120, f"every Pod of the {kind} placed")
    assert {p.spec.node_name for p in placed} == pool_nodes, "one Pod per gang node"
    on_placed(placed)
    eventually(
        lambda: conditions(workload_of(env, namespace, name, kind)).get("Finished") == "True",
        180,
        f"{kind}'s Workload finished",
    )
    eventually(
        lambda: not ((pool(env, pool_name) or {}).get("spec") or {}).get("claim"),
        60,
        "the claim released",
    )
    eventually(lambda: phase(env, pool_name) == Phase.KEEP_WARM, 60, "the set kept warm")
    reasons = {e.reason for e in _events_on(env, namespace, kind, name)}
    assert {"PoolCreated", c.EventReason.GANG_READY, "ClaimReleased"} <= reasons, reasons
    return pool_name


def test_a_jobset_is_held_at_zero_then_gets_its_gang_and_a_job_reuses_its_warm_set(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local(training_controllers=True)
    pool_name = _held_then_run(
        env,
        namespace,
        "JobSet",
        "pretrain",
        lambda p: submit_jobset(env, namespace, "pretrain", p, leaders=1, workers=3, count="4"),
    )
    pods = gang_pods(env, namespace, "JobSet", "pretrain")
    jobs = {
        ref.name for p in pods for ref in p.metadata.owner_references or [] if ref.kind == "Job"
    }
    assert len(jobs) == 2, f"Pods of both replicated jobs: {jobs}"
    # A Job of the same shape and pool: the JobSet's warm set, no new launch.
    submit(env, namespace, "finetune", pool_name, count="4")
    eventually(
        lambda: conditions(workload_of(env, namespace, "finetune")).get("Admitted") == "True",
        120,
        "the Job admitted on the warm set",
    )
    assert launched(env, pool_name) == 4, "the warm set was reused, nothing new launched"


def test_a_pytorchjob_is_held_at_zero_then_gets_its_gang(gang_local: Any, namespace: str) -> None:
    env = gang_local(training_controllers=True)
    _held_then_run(
        env,
        namespace,
        "PyTorchJob",
        "torch",
        lambda p: submit_pytorchjob(env, namespace, "torch", p, workers=3),
    )


def test_a_trainjob_is_held_at_zero_then_gets_its_gang(gang_local: Any, namespace: str) -> None:
    env = gang_local(training_controllers=True)
    _held_then_run(
        env,
        namespace,
        "TrainJob",
        "trainer",
        lambda p: submit_trainjob(env, namespace, "trainer", p, nodes=4),
    )


def test_an_mpijob_is_held_at_zero_then_runs_its_launcher_and_workers_on_its_gang(
    gang_local: Any, namespace: str
) -> None:
    """Under the real mpi-operator: Kueue counts the Launcher as a pod set beside the
    Workers, so the gang is 1 + 3 nodes; the launcher Job's Pod and the 3 worker Pods land
    one per gang node, and the MPIJob succeeds. A mis-counted MPIJob is refused at apply,
    naming its kind."""
    env = gang_local(training_controllers=True)
    with pytest.raises(ApiException) as refused:
        submit_mpijob(env, namespace, "miscounted", "mpi-miscounted", workers=4, count="4")
    assert refused.value.status in (400, 403, 422), refused.value
    assert "the MPIJob runs 5 pods" in str(refused.value.body), refused.value.body
    roles: list[str] = []

    def record_roles(pods: list[Any]) -> None:
        roles.extend(sorted(p.metadata.labels.get(MPI_ROLE_LABEL, "") for p in pods))

    _held_then_run(
        env,
        namespace,
        "MPIJob",
        "allreduce",
        lambda p: submit_mpijob(env, namespace, "allreduce", p, workers=3),
        record_roles,
    )
    assert roles == ["launcher", "worker", "worker", "worker"], roles
    wl = workload_of(env, namespace, "allreduce", "MPIJob")
    pod_sets = [(ps["name"], ps["count"]) for ps in (wl or {})["spec"]["podSets"]]
    assert pod_sets == [("launcher", 1), ("worker", 3)], pod_sets
    api = env.control_plane.api_client()  # type: ignore[union-attr]
    done = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "kubeflow.org", "v2beta1", namespace, "mpijobs", "allreduce"
    )
    assert conditions(done).get("Succeeded") == "True", done.get("status")


def test_a_workload_of_another_kind_is_rejected_once_and_no_pool_is_made(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local()
    api = env.control_plane.api_client()  # type: ignore[union-attr]
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    # An object of a kind no gang is read from, owning a Workload on our queue.
    owner = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "not-a-gang"}, "data": {}}
    )
    name = "foreign"
    custom.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "workloads",
        {
            "apiVersion": kobj.KUEUE_API,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "not-a-gang",
                        "uid": owner.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "queueName": kobj.QUEUE_NAME,
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "registry.local/trainer:latest",
                                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        },
    )

    def rejections() -> list[Any]:
        return [
            e
            for e in _events_on(env, namespace, "Workload", name)
            if e.reason == c.EventReason.UNSUPPORTED_OWNER_KIND
        ]

    # Kueue answers our Rejected by deactivating the Workload (and then resets the check's
    # state), so the answer is read from its Event and the deactivation.
    first = eventually(rejections, 90, "our check Rejected, as an Event on the Workload")
    message = first[0].message
    assert "is owned by v1 ConfigMap not-a-gang" in message, message
    assert "jobset.x-k8s.io/v1alpha2 JobSet" in message and "batch/v1 Job" in message
    eventually(
        lambda: (
            custom.get_namespaced_custom_object(*KUEUE, namespace, "workloads", name)["spec"].get(
                "active"
            )
            is False
        ),
        60,
        "Kueue deactivating the rejected Workload",
    )
    # Once: a while later, still that one Event, never repeated, and no pool.
    time.sleep(5)
    events = rejections()
    assert len(events) == 1 and (events[0].count or 1) == 1, events
    assert custom.list_cluster_custom_object(*GNP)["items"] == []
