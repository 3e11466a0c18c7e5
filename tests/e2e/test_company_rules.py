"""Company rules on the embedded default: an account whose organization denies launches
without a `CostCenter` tag (an SCP, switched on in the emulator).

With the installer's `instances.extraTags` the gang launches, and every instance, its
volumes and interfaces, and the pool's launch template carry the tag, and the root volume
is the installer's size on the AMI's root device. Without the tag: test_company_rules_refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.e2e.conftest import GNP, KUEUE, eventually, submit
from tests.support.ec2_listing import described_instances

COST = {"CostCenter": "cc-4711"}


class _Reads:
    """The test's reads of the cluster on one client, closed at the end (a client per
    poll would leave its TLS connections to the garbage collector)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._custom = k8s.CustomObjectsApi(api)

    def pool_status(self, name: str) -> dict[str, Any]:
        try:
            found = self._custom.get_cluster_custom_object(*GNP, name)
        except k8s.ApiException as err:
            if err.status == 404:
                return {}
            raise
        return dict(found.get("status") or {})

    def checks_of(self, namespace: str, job: str) -> list[dict[str, Any]]:
        for wl in self._custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")[
            "items"
        ]:
            owners = wl["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
                return list((wl.get("status") or {}).get("admissionChecks") or [])
        return []


@contextmanager
def _reads(env: Any) -> Iterator[_Reads]:
    api = env.control_plane.api_client()
    try:
        yield _Reads(api)
    finally:
        api.close()


def _tags(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in items or ()}


def test_in_an_account_requiring_cost_center_a_job_launches_with_the_installers_tags(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local(instances={"extraTags": COST, "rootVolume": {"volumeSize": "200Gi"}})
    env.emulator_client.require_launch_tags(["CostCenter"])
    pool_name = f"cc-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "gang", pool_name)
    with _reads(env) as reads:
        eventually(
            lambda: reads.pool_status(pool_name).get("phase") == Phase.SATISFIED,
            180,
            "pool Satisfied",
        )

    ec2 = env.ec2_client()
    instances = described_instances(ec2, [{"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]}])
    assert len(instances) == 2
    for instance in instances:
        assert _tags(instance.get("Tags"))["CostCenter"] == "cc-4711"
        volumes = [m["Ebs"]["VolumeId"] for m in instance["BlockDeviceMappings"]]
        for volume in ec2.describe_volumes(VolumeIds=volumes)["Volumes"]:
            assert _tags(volume.get("Tags"))["CostCenter"] == "cc-4711"
        # The root volume is the installer's size, on the AMI's root device: one disk.
        (root,) = [m for m in instance["BlockDeviceMappings"]]
        assert root["DeviceName"] == instance["RootDeviceName"]
        sized = ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"][0]
        assert sized["Size"] == 200
    templates = ec2.describe_launch_templates(
        Filters=[{"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]}]
    )["LaunchTemplates"]
    assert templates and all(_tags(t.get("Tags"))["CostCenter"] == "cc-4711" for t in templates)
