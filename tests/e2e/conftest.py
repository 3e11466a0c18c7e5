"""E2E wiring: the whole local installation over the session's shared parts.

`gang_local` builds a `LocalEnvironment` on the session's control plane, Kueue manager and
EC2 emulator (reset for the test), starts what sits above them (AWS identity, node, Job and
Pod simulators, the controller, the bootstrap's Kueue objects with a LocalQueue in the test's
namespace) and, at the end, releases every pool through its finalizer before stopping them.
`gang_local(training_controllers=True)` adds the session's JobSet controller, training
operator and Trainer (started on first use, shared by the session's tests), for gangs
submitted as a JobSet, PyTorchJob or TrainJob (`submit_jobset`, `submit_pytorchjob`,
`submit_trainjob`; bodies from `tests.support.gang_kinds`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from devenv.nodesim import SIMULATED_LABEL
from provisioner.api import constants as c
from tests.support import gang_kinds
from tests.support.ec2_listing import described_instances
from tests.support.gang_kinds import GANG_KINDS
from tests.support.kueue_status import ADMISSION_CHECKS, wait_until_active
from tests.support.waiting import eventually

T = TypeVar("T")
KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


@pytest.fixture
def gang_local(
    control_plane: Any,
    kueue: Any,
    emulator: Any,
    pulumi_tool: Any,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., LocalEnvironment]]:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "e2e")
    started: list[LocalEnvironment] = []

    def make(**options: Any) -> LocalEnvironment:
        options.setdefault("join_delay", 0.5)
        options.setdefault("job_run_seconds", 2.0)
        # Off by default: only the tests of JobSet, PyTorchJob and TrainJob gangs pay for them.
        options.setdefault("training_controllers", False)
        env = LocalEnvironment(work_dir=tmp_path / "env", queue_namespaces=(namespace,), **options)
        env.control_plane, env.kueue, env.emulator = control_plane, kueue, emulator
        if env.training_controllers:
            env.training = request.getfixturevalue("training_controllers")
        started.append(env)
        env.start_gang_parts(pulumi_tool)
        return env

    yield make

    api = control_plane.api_client()
    custom = k8s.CustomObjectsApi(api)
    k8s.BatchV1Api(api).delete_collection_namespaced_job(namespace, propagation_policy="Background")
    for group, version, plural in GANG_KINDS:
        if started and started[0].training is not None:
            custom.delete_collection_namespaced_custom_object(group, version, namespace, plural)
    custom.delete_collection_namespaced_custom_object(*KUEUE, namespace, "workloads")
    for pool in custom.list_cluster_custom_object(*GNP)["items"]:
        custom.delete_cluster_custom_object(*GNP, pool["metadata"]["name"])
    if started and started[0].manager is not None:
        eventually(
            lambda: not custom.list_cluster_custom_object(*GNP)["items"],
            120,
            "pools released through their finalizer",
        )
    for env in started:
        env.stop()
    for pool in custom.list_cluster_custom_object(*GNP)["items"]:
        custom.patch_cluster_custom_object(
            *GNP, pool["metadata"]["name"], {"metadata": {"finalizers": None}}
        )
    core = k8s.CoreV1Api(api)
    for node in core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
        core.delete_node(node.metadata.name)


def submit(env: LocalEnvironment, namespace: str, name: str, pool: str, **ann: str) -> Any:
    count = int(ann.pop("count", "2"))
    job = ko.gang_job(namespace, name, ko.QUEUE_NAME, pool, count, ann)
    return k8s.BatchV1Api(env.control_plane.api_client()).create_namespaced_job(  # type: ignore[union-attr]
        namespace, job
    )


def submit_jobset(
    env: LocalEnvironment,
    namespace: str,
    name: str,
    pool: str,
    *,
    leaders: int = 1,
    workers: int = 3,
    count: str | None = None,
    **ann: str,
) -> dict[str, Any]:
    """A JobSet gang on our queue: `leader` of `leaders` Pods and `workers` of `workers`.
    `count` overrides the gang annotation (else their sum); `ann`: more annotations."""
    body = gang_kinds.jobset(
        namespace, name, ko.QUEUE_NAME, pool, leaders=leaders, workers=workers, annotations=ann
    )
    return _create_gang(env, body, count)


def submit_pytorchjob(
    env: LocalEnvironment,
    namespace: str,
    name: str,
    pool: str,
    *,
    workers: int = 3,
    count: str | None = None,
    **ann: str,
) -> dict[str, Any]:
    """A PyTorchJob gang on our queue: Master 1, Worker `workers`."""
    body = gang_kinds.pytorchjob(
        namespace, name, ko.QUEUE_NAME, pool, workers=workers, annotations=ann
    )
    return _create_gang(env, body, count)


def submit_trainjob(
    env: LocalEnvironment,
    namespace: str,
    name: str,
    pool: str,
    *,
    nodes: int = 4,
    count: str | None = None,
    **ann: str,
) -> dict[str, Any]:
    """A TrainJob gang of `nodes` nodes on our queue, on the embedded default's
    ClusterTrainingRuntime (`devenv.training_crds.TORCH_RUNTIME`)."""
    body = gang_kinds.trainjob(namespace, name, ko.QUEUE_NAME, pool, nodes=nodes, annotations=ann)
    return _create_gang(env, body, count)


def submit_mpijob(
    env: LocalEnvironment,
    namespace: str,
    name: str,
    pool: str,
    *,
    workers: int = 3,
    count: str | None = None,
    **ann: str,
) -> dict[str, Any]:
    """An MPIJob gang on our queue: Launcher 1, Worker `workers`."""
    body = gang_kinds.mpijob(namespace, name, ko.QUEUE_NAME, pool, workers=workers, annotations=ann)
    return _create_gang(env, body, count)


def _create_gang(env: LocalEnvironment, body: dict[str, Any], count: str | None) -> dict[str, Any]:
    if count is not None:
        body["metadata"]["annotations"][c.ANN_COUNT] = count
    return gang_kinds.create(env.control_plane.api_client(), body)  # type: ignore[union-attr]


def gang_pods(env: LocalEnvironment, namespace: str, kind: str, name: str) -> list[Any]:
    """Every Pod (V1Pod) the top-level object ran as (`tests.support.gang_kinds`)."""
    return gang_kinds.gang_pods(env.control_plane.api_client(), namespace, kind, name)  # type: ignore[union-attr]


def workload_of(
    env: LocalEnvironment, namespace: str, job: str, kind: str = "Job"
) -> dict[str, Any] | None:
    """The Workload Kueue made for the top-level `kind`/`job` (its owner)."""
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    for wl in custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]:
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == kind and o.get("name") == job for o in owners):
            return dict(wl)
    return None


def conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {x["type"]: x["status"] for x in ((obj or {}).get("status") or {}).get("conditions", [])}


def check_state(wl: dict[str, Any] | None) -> str | None:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks", []):
        if entry["name"] == ko.CHECK_NAME:
            return str(entry["state"])
    return None


def pool(env: LocalEnvironment, name: str) -> dict[str, Any] | None:
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    try:
        return dict(custom.get_cluster_custom_object(*GNP, name))
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise


def phase(env: LocalEnvironment, name: str) -> str | None:
    return ((pool(env, name) or {}).get("status") or {}).get("phase")


def launched(env: LocalEnvironment, pool_name: str) -> int:
    """Instances ever launched for the pool, in any state."""
    return len(
        described_instances(
            env.ec2_client(), [{"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]}]
        )
    )


@pytest.fixture
def healthy(gang_local: Any) -> LocalEnvironment:
    """The embedded default with its controller leading and our AdmissionCheck Active: the
    healthy world each doctor test starts from and breaks one link of."""
    env: LocalEnvironment = gang_local()
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    wait_until_active(custom, ADMISSION_CHECKS, ko.CHECK_NAME, what="our AdmissionCheck Active")
    eventually(lambda: env.manager.is_leading(), what="the controller leading")
    return env
