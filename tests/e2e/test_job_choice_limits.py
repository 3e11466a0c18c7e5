"""What a Job may choose is bounded by the installer: an AMI outside amiPolicy and a
max-lifetime above limits.maxLifetime are refused at `kubectl apply`, and nothing launches.

On the embedded default (the real apiserver, the chart's webhook registration, the EC2
emulator), a Job naming a public image another account shared, and a Job asking for
876000h, are each refused at create with the setting named; the webhook learns the image's
owner from EC2's DescribeImages. With the webhook off (it may be disabled, or fail open),
the same Jobs get as far as the admission check: the lifetime is Rejected there, and the
pool refuses the AMI before it prepares or launches anything. No instance exists at the end.
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
from tests.e2e.conftest import KUEUE, check_state, workload_of
from tests.support.ec2_listing import described_instances
from tests.support.waiting import eventually

STRANGER = "999988887777"
GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)


def _refused(batch: k8s.BatchV1Api, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(k8s.ApiException) as err:
        batch.create_namespaced_job(namespace, body)
    return dict(json.loads(err.value.body))


def _community_ami(env: LocalEnvironment) -> str:
    assert env.emulator is not None
    return str(env.emulator.client.share_public_ami(STRANGER, "handy-cuda-image"))


def test_ami_and_lifetime_outside_the_limits_are_refused_at_apply(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local()
    batch = k8s.BatchV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    community = _community_ami(env)

    stranger_image = ko.gang_job(
        namespace, "stranger-image", ko.QUEUE_NAME, "pool-ami", 2, {c.ANN_AMI_ID: community}
    )
    status = _refused(batch, namespace, stranger_image)
    assert status["code"] == 422
    (cause,) = status["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{c.ANN_AMI_ID}]"
    assert f"owned by {STRANGER}" in cause["message"]
    assert "amiPolicy.allowedOwners (amazon, self)" in cause["message"]
    assert "amiPolicy.allowedImageIds" in cause["message"]

    forever = ko.gang_job(
        namespace, "forever", ko.QUEUE_NAME, "pool-life", 2, {c.ANN_MAX_LIFETIME: "876000h"}
    )
    status = _refused(batch, namespace, forever)
    (cause,) = status["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{c.ANN_MAX_LIFETIME}]"
    assert "at most 168h0m0s (limits.maxLifetime" in cause["message"]

    assert batch.list_namespaced_job(namespace).items == []
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    assert custom.list_cluster_custom_object(*GNP)["items"] == []
    assert described_instances(env.ec2_client()) == []


def test_without_the_webhook_the_check_and_the_pool_refuse_them(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local(with_webhook=False)
    api = env.control_plane.api_client()  # type: ignore[union-attr]
    batch, custom = k8s.BatchV1Api(api), k8s.CustomObjectsApi(api)
    community = _community_ami(env)
    batch.create_namespaced_job(
        namespace,
        ko.gang_job(
            namespace, "forever", ko.QUEUE_NAME, "pool-life", 2, {c.ANN_MAX_LIFETIME: "876000h"}
        ),
    )
    batch.create_namespaced_job(
        namespace,
        ko.gang_job(
            namespace, "stranger-image", ko.QUEUE_NAME, "pool-ami", 2, {c.ANN_AMI_ID: community}
        ),
    )

    # The lifetime: Rejected at the admission check, naming the limit. Kueue deactivates a
    # Workload whose check is Rejected and then puts the check back to Pending, so on a busy
    # machine a poll can miss the Rejected state: the Warning Event our controller records
    # with the state change is read as well.
    core = k8s.CoreV1Api(api)

    def rejection() -> str | None:
        wl = workload_of(env, namespace, "forever")
        if not wl:
            return None
        for entry in (wl.get("status") or {}).get("admissionChecks", []):
            if entry["name"] == ko.CHECK_NAME and entry["state"] == c.CheckState.REJECTED:
                return str(entry["message"])
        selector = f"involvedObject.name={wl['metadata']['name']},type=Warning"
        for event in core.list_namespaced_event(namespace, field_selector=selector).items:
            if "limits.maxLifetime" in (event.message or ""):
                return str(event.message)
        return None

    message = eventually(rejection, 180, "the max-lifetime Workload rejected at the check")
    assert "limits.maxLifetime" in message

    # The AMI: the pool refuses it before preparing or launching, and says why.
    def refused_pool() -> dict[str, Any] | None:
        try:
            pool = dict(custom.get_cluster_custom_object(*GNP, "pool-ami"))
        except k8s.ApiException:
            return None
        error = (pool.get("status") or {}).get("lastError") or {}
        return pool if error.get("reason") == "AmiNotAllowed" else None

    pool = eventually(refused_pool, 180, "the pool refusing the Job's AMI")
    message = pool["status"]["lastError"]["message"]
    assert f"owned by {STRANGER}" in message and "amiPolicy.allowedOwners" in message
    workload = eventually(
        lambda: (
            (wl := workload_of(env, namespace, "stranger-image"))
            and "amiPolicy" in json.dumps((wl.get("status") or {}).get("admissionChecks", []))
            and wl
        ),
        180,
        "the AMI Workload's check naming amiPolicy",
    )
    assert check_state(workload) != c.CheckState.READY
    assert custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    assert described_instances(env.ec2_client()) == []
