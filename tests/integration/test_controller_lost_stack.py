"""A pool whose stack is gone from the backend while it owns instances, a launch template and
a placement group: its release still leaves none of them, and deletes nothing else that
merely carries its tags (a look-alike its stack never recorded stays, reported).

The state is removed behind the running controller's back (the objects deleted from the
emulator's S3 bucket, as an emptied or mistargeted backend would), so the controller's own
memory still believes in the stack. Real apiserver, Pulumi CLI and emulator; the harness's
in-process controller.
"""

from __future__ import annotations

from typing import Any

import pytest

from devenv.state_backend import seed_state_backend
from provisioner.api import constants as c
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually

pytestmark = pytest.mark.integration

POOL = "pool-lost-stack"


def _ours(env: GangEnv) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]},
        {"Name": f"tag:{c.TAG_POOL}", "Values": [POOL]},
    ]


def launch_templates(env: GangEnv) -> list[str]:
    found = env.ec2.describe_launch_templates(Filters=_ours(env))["LaunchTemplates"]
    return [t["LaunchTemplateName"] for t in found]


def placement_groups(env: GangEnv) -> list[str]:
    found = env.ec2.describe_placement_groups(Filters=_ours(env))["PlacementGroups"]
    return [g["GroupName"] for g in found if g.get("State") != "deleted"]


def test_a_pool_whose_stack_is_lost_leaves_no_instance_template_or_group_after_release(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    state = seed_state_backend(env.emulator.endpoint_url, REGION)
    workload = env.submit("lost", POOL, count=2, **{c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER})
    env.wait_check(workload, c.CheckState.READY, timeout=180)
    eventually(
        lambda: (env.pool(POOL) or {}).get("status", {}).get("recordedGroup") is not None,
        120,
        "the set recorded in the stack",
    )
    assert len(env.live_instances(POOL)) == 2
    assert len(launch_templates(env)) == 1 and len(placement_groups(env)) == 1
    # Someone else's template, tagged as this pool's: tags prove nothing.
    look_alike = "team-b-template"
    env.ec2.create_launch_template(
        LaunchTemplateName=look_alike,
        LaunchTemplateData={"InstanceType": "m5.large"},
        TagSpecifications=[
            {
                "ResourceType": "launch-template",
                "Tags": [
                    {"Key": c.TAG_MANAGED, "Value": "true"},
                    {"Key": c.TAG_CLUSTER, "Value": CLUSTER},
                    {"Key": c.TAG_POOL, "Value": POOL},
                ],
            }
        ],
    )

    project = env.settings.pulumi.project_name
    stack_keys = [
        key
        for key in state.stack_keys()
        if key.startswith(f".pulumi/stacks/{project}/{POOL}.json")
        or key.startswith(f".pulumi/history/{project}/{POOL}/")
    ]
    assert any(key.endswith(f"{POOL}.json") for key in stack_keys), state.stack_keys()
    for key in stack_keys:
        state.client("s3").delete_object(Bucket=state.bucket, Key=key)

    env.kueue.finish(env.namespace, workload)
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
    eventually(lambda: env.pool(POOL) is None, 180, "the pool released and removed")

    assert env.live_instances(POOL) == []
    assert launch_templates(env) == [look_alike]
    env.ec2.delete_launch_template(LaunchTemplateName=look_alike)
    assert placement_groups(env) == []
    assert [s.name for s in env.driver.list_stacks()] == []
