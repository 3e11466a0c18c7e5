"""A gang whose pods cannot fit one node of its instance type is refused, naming the
resource, the request and what the type offers: at `kubectl apply` (the chart's webhook,
which asks the EC2 emulator's DescribeInstanceTypes), and, with the webhook off, at the
Workload's admission check. Nothing is created for it, nothing launched.

The two Jobs: 16 GPUs per pod on p4d.24xlarge (8 GPUs), and 200 GiB per pod on m5.large
(8 GiB, of which the EKS AL2023 AMI keeps 674 MiB back: 7518Mi offered). One pod each, so
Kueue's default quota (256 GiB of memory) reserves for them and the Workload path is
reached.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from tests.e2e.conftest import GNP, workload_of
from tests.support.ec2_listing import described_instances
from tests.support.waiting import eventually

# (Job name, instance type, the pod's resources, what the refusal must name)
UNFIT = [
    (
        "sixteen-gpus",
        "p4d.24xlarge",
        {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {c.RESOURCE_GPU: "16"}},
        ("nvidia.com/gpu: 16", "one p4d.24xlarge node offers 8", "8 NVIDIA GPUs"),
    ),
    (
        "too-much-memory",
        "m5.large",
        {"requests": {"cpu": "1", "memory": "200Gi"}},
        ("memory: 200Gi", "one m5.large node offers 7518Mi", "8192 MiB less the 674 MiB"),
    ),
]


def _job(namespace: str, name: str, instance_type: str, resources: Any) -> dict[str, Any]:
    body = ko.gang_job(
        namespace, name, ko.QUEUE_NAME, f"pool-{name}", 1, {c.ANN_INSTANCE_TYPE: instance_type}
    )
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return body


def _nothing_made(env: LocalEnvironment) -> None:
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    assert custom.list_cluster_custom_object(*GNP)["items"] == []
    assert described_instances(env.ec2_client()) == []


def test_pods_that_cannot_fit_their_type_are_refused_at_apply(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local()
    batch = k8s.BatchV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    for name, instance_type, resources, says in UNFIT:
        with pytest.raises(k8s.ApiException) as err:
            batch.create_namespaced_job(namespace, _job(namespace, name, instance_type, resources))
        status = json.loads(err.value.body)
        assert status["code"] == 422, status
        (cause,) = status["details"]["causes"]
        assert cause["field"] == f"metadata.annotations[{c.ANN_INSTANCE_TYPE}]"
        for phrase in says:
            assert phrase in cause["message"], cause["message"]
    assert batch.list_namespaced_job(namespace).items == []
    _nothing_made(env)


def test_without_the_webhook_the_admission_check_rejects_them(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local(with_webhook=False)
    api = env.control_plane.api_client()  # type: ignore[union-attr]
    batch, core = k8s.BatchV1Api(api), k8s.CoreV1Api(api)
    for name, instance_type, resources, _says in UNFIT:
        batch.create_namespaced_job(namespace, _job(namespace, name, instance_type, resources))

    def rejection(job: str) -> str | None:
        # Kueue deactivates a Workload whose check is Rejected and puts the check back to
        # Pending, so a poll can miss the state: the Warning Event our controller records
        # with the change is read as well.
        wl = workload_of(env, namespace, job)
        if not wl:
            return None
        for entry in (wl.get("status") or {}).get("admissionChecks", []):
            if entry["name"] == ko.CHECK_NAME and entry["state"] == c.CheckState.REJECTED:
                return str(entry["message"])
        selector = f"involvedObject.name={wl['metadata']['name']},type=Warning"
        for event in core.list_namespaced_event(namespace, field_selector=selector).items:
            if c.ANN_INSTANCE_TYPE in (event.message or ""):
                return str(event.message)
        return None

    for name, _type, _resources, says in UNFIT:
        message = eventually(lambda job=name: rejection(job), 180, f"{name} rejected")
        for phrase in says:
            assert phrase in message, message
    _nothing_made(env)
