"""A pool whose first prepare failed partway, after its placement group was made and before
its launch template: deleting the pool destroys the stack anyway, so neither the group nor
the stack outlives it.

A failed `up` keeps what it created in the stack's state (here the group), but the program's
outputs are never registered, so the stack reads as not prepared. The release used to skip
the stack's destroy for such a stack; the group then carried the pool's tags with no stack
record to prove it the pool's, and was reported and left, with the stack, for good.

Real apiserver, Pulumi CLI and emulator (the S3 backend); the harness's in-process
controller; EC2 refuses every CreateLaunchTemplate of the test (an error the controller
does not retry at once).
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from tests.integration.controller_harness import CLUSTER, GangEnv, eventually

pytestmark = pytest.mark.integration

POOL = "pool-failed-prepare"


def _ours() -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]},
        {"Name": f"tag:{c.TAG_POOL}", "Values": [POOL]},
    ]


def placement_groups(env: GangEnv) -> list[str]:
    found = env.ec2.describe_placement_groups(Filters=_ours())["PlacementGroups"]
    return [g["GroupName"] for g in found if g.get("State") != "deleted"]


def launch_templates(env: GangEnv) -> list[str]:
    found = env.ec2.describe_launch_templates(Filters=_ours())["LaunchTemplates"]
    return [t["LaunchTemplateName"] for t in found]


def test_a_pool_whose_first_prepare_failed_partway_leaves_no_group_and_no_stack(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    env.emulator.client.inject_fault(
        "CreateLaunchTemplate",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
        count=100,
    )
    workload = env.submit("failing", POOL, count=2, **{c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER})

    def prepare_failed() -> bool:
        last = env.driver.last_operation(POOL)
        return last is not None and last.operation == "prepare" and last.result == "failed"

    eventually(prepare_failed, 120, "the first prepare failed")
    # What the failed `up` made is in AWS and in the stack's state, and nothing else is.
    assert placement_groups(env) != []
    assert launch_templates(env) == []
    assert env.driver.outputs(POOL) is None
    assert [s.name for s in env.driver.list_stacks()] == [POOL]
    assert env.live_instances(POOL) == []

    env.kueue.finish(env.namespace, workload)
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
    eventually(lambda: env.pool(POOL) is None, 180, "the pool released and removed")

    assert placement_groups(env) == []
    assert launch_templates(env) == []
    assert [s.name for s in env.driver.list_stacks()] == []
