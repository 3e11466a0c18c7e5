"""E2E wiring: the whole local installation over the session's shared parts.

`gang_local` builds a `LocalEnvironment` on the session's control plane, Kueue manager and
EC2 emulator (reset for the test), starts what sits above them (AWS identity, node and Job
simulators, the controller, the bootstrap's Kueue objects with a LocalQueue in the test's
namespace) and, at the end, releases every pool through its finalizer before stopping them.
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
from tests.support.ec2_listing import described_instances
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
) -> Iterator[Callable[..., LocalEnvironment]]:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "e2e")
    started: list[LocalEnvironment] = []

    def make(**options: Any) -> LocalEnvironment:
        options.setdefault("join_delay", 0.5)
        options.setdefault("job_run_seconds", 2.0)
        env = LocalEnvironment(work_dir=tmp_path / "env", queue_namespaces=(namespace,), **options)
        env.control_plane, env.kueue, env.emulator = control_plane, kueue, emulator
        started.append(env)
        env.start_gang_parts(pulumi_tool)
        return env

    yield make

    api = control_plane.api_client()
    custom = k8s.CustomObjectsApi(api)
    k8s.BatchV1Api(api).delete_collection_namespaced_job(namespace, propagation_policy="Background")
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


def workload_of(env: LocalEnvironment, namespace: str, job: str) -> dict[str, Any] | None:
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    for wl in custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]:
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
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
    eventually(
        lambda: any(
            x["type"] == "Active" and x["status"] == "True"
            for x in custom.get_cluster_custom_object(*KUEUE, "admissionchecks", ko.CHECK_NAME)
            .get("status", {})
            .get("conditions", [])
        ),
        what="our AdmissionCheck Active",
    )
    eventually(lambda: env.manager.is_leading(), what="the controller leading")
    return env
