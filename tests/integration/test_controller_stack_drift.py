"""A resource of the pool's stack deleted by hand between two gangs (its launch template, its
cluster placement group, its self-managed instance profile) is made again, and the pool says
so once.

The first gang runs and is released (the prepared stack is kept for the next claim); then the
resource is deleted with AWS's own API, as an operator cleaning up would. The next gang's
launch meets it gone (for the profile, EC2's ``InvalidParameterValue`` "Invalid IAM Instance
Profile ARN"), the pool goes back to a prepare that refreshes the stack (Pulumi's `refresh`
drops what AWS no longer has) and makes it again, and the gang is Ready on it.

The emulator remembers CreateLaunchTemplate's ClientTokens as EC2 documents (a repeated token
answers the original template, deleted or not), so the template's repair passes only if its
create sends a new token: with the token of the first create, EC2 hands back the deleted
template and the gang never launches.
Real apiserver, Pulumi CLI and emulator; the harness's in-process controller.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.cloud.naming import instance_profile_name
from tests.integration.controller_harness import (
    CLUSTER,
    REGION,
    ROLE_NAME,
    TEST_CLIENT_KEY,
    GangEnv,
    eventually,
)

pytestmark = pytest.mark.integration


def _pool_events(env: GangEnv, pool: str) -> list[tuple[str, str]]:
    uid = (env.pool(pool) or {})["metadata"]["uid"]
    core = k8s.CoreV1Api(env.custom.api_client)
    found = core.list_namespaced_event("default", field_selector=f"involvedObject.uid={uid}")
    return [(e.reason, e.message) for e in found.items]


def _first_gang_run_and_released(env: GangEnv, pool: str, **annotations: str) -> None:
    first = env.submit("first", pool, count=2, **{c.ANN_KEEP_WARM_TTL: "0s"}, **annotations)
    env.wait_check(first, c.CheckState.READY, timeout=180)
    env.kueue.finish(env.namespace, first)
    env.wait_phase(pool, "Idle", timeout=120)
    eventually(lambda: env.live_instances(pool) == [], 60, "the first set terminated")


def _second_gang_ready(env: GangEnv, pool: str, **annotations: str) -> None:
    second = env.submit("second", pool, count=2, **{c.ANN_KEEP_WARM_TTL: "0s"}, **annotations)
    env.wait_check(second, c.CheckState.READY, timeout=240)
    assert len(env.live_instances(pool)) == 2


def _repairs(env: GangEnv, pool: str) -> list[str]:
    return [m for reason, m in _pool_events(env, pool) if reason == c.EventReason.STACK_REPAIRED]


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_a_launch_template_deleted_by_hand_is_made_again_for_the_next_gang(
    gang_env_factory: Any, mode: str
) -> None:
    env: GangEnv = gang_env_factory()
    pool = f"pool-drift-lt-{mode}"
    _first_gang_run_and_released(env, pool, **{c.ANN_MODE: mode})
    old = env.driver.read_outputs(pool)
    assert old is not None
    env.ec2.delete_launch_template(LaunchTemplateId=old.launch_template_id)

    _second_gang_ready(env, pool, **{c.ANN_MODE: mode})

    new = env.driver.read_outputs(pool)
    assert new is not None and new.launch_template_id != old.launch_template_id
    found = env.ec2.describe_launch_templates(LaunchTemplateIds=[new.launch_template_id])
    assert [t["LaunchTemplateId"] for t in found["LaunchTemplates"]] == [new.launch_template_id]
    assert _repairs(env, pool) == [
        f"Launch template {old.launch_template_id} was deleted outside the stack; "
        f"recreated as {new.launch_template_id}."
    ]


def test_a_placement_group_deleted_by_hand_is_made_again_for_the_next_gang(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    pool = "pool-drift-pg"
    cluster_group = {c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER}
    _first_gang_run_and_released(env, pool, **cluster_group)
    outputs = env.driver.read_outputs(pool)
    assert outputs is not None and outputs.placement_group_name
    group = outputs.placement_group_name
    env.ec2.delete_placement_group(GroupName=group)

    _second_gang_ready(env, pool, **cluster_group)

    groups = env.ec2.describe_placement_groups(GroupNames=[group])["PlacementGroups"]
    assert [g["GroupName"] for g in groups] == [group]
    placed = {i["Placement"].get("GroupName") for i in env.live_instances(pool)}
    assert placed == {group}
    assert _repairs(env, pool) == [
        f"Placement group {group} was deleted outside the stack; recreated."
    ]


def _iam(env: GangEnv) -> Any:
    return boto3.client(
        "iam",
        region_name=REGION,
        endpoint_url=env.emulator.endpoint_url,
        aws_access_key_id=TEST_CLIENT_KEY,
        aws_secret_access_key="testing",
    )


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_an_instance_profile_deleted_by_hand_is_made_again_for_the_next_gang(
    gang_env_factory: Any, mode: str
) -> None:
    env: GangEnv = gang_env_factory(iam={"selfManageInstanceProfile": True})
    pool = f"pool-drift-ip-{mode}"
    _first_gang_run_and_released(env, pool, **{c.ANN_MODE: mode})
    iam = _iam(env)
    name = instance_profile_name(CLUSTER, ROLE_NAME)
    iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=ROLE_NAME)
    iam.delete_instance_profile(InstanceProfileName=name)

    _second_gang_ready(env, pool, **{c.ANN_MODE: mode})

    profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [ROLE_NAME]
    assert _repairs(env, pool) == [
        f"Instance profile {name} was deleted outside the stack; recreated."
    ]
    assert not [m for reason, m in _pool_events(env, pool) if reason == "InvalidRequest"], (
        "the unknown profile was read as a shape error"
    )
