"""A prepared stack follows its inputs: when the AMI EKS recommends rotates between two
launches of one pool, the pool prepares again once (a new launch template version with the
new image) before it launches; when nothing changed, the next launch prepares nothing.

The pool relaunches within one claim the way a real one does: its first set never joins,
the join watchdog releases it, and the next generation launches from the stack.
"""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator import eks_ami_id, eks_ami_parameter_name
from devenv.emulator.model import DEFAULT_CLUSTER_VERSION
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.integration.controller_harness import REGION, GangEnv

pytestmark = pytest.mark.integration

N = 2
PARAMETER = eks_ami_parameter_name(DEFAULT_CLUSTER_VERSION, "x86_64", "standard")


def prepares(env: GangEnv) -> float:
    """Prepares this env's controller has timed (on its own registry: nothing earlier
    tests in the process did)."""
    found = env.manager.metrics.registry.get_sample_value(
        "atomic_gang_stack_operation_seconds_count",
        {"operation": "prepare", "result": "succeeded"},
    )
    return found or 0.0


def images(env: GangEnv, ids: list[str]) -> set[str]:
    found = env.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["ImageId"] for r in found for i in r["Instances"]}


def template_versions(env: GangEnv, pool: str) -> list[dict[str, Any]]:
    templates = env.ec2.describe_launch_templates()["LaunchTemplates"]
    (template,) = [t for t in templates if t["LaunchTemplateName"].endswith(pool)]
    found = env.ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])
    return list(found["LaunchTemplateVersions"])


def relaunch(env: GangEnv, pool: str, rotate_to: str | None) -> tuple[list[str], list[str]]:
    """Claim `pool`, let its first set never join, optionally rotate the AMI, and return the
    first and the second set's instance ids once the second is Satisfied."""
    env.nodes.join_delay = 3600.0
    workload = env.submit(pool, pool, count=N)
    joining = env.wait_phase(pool, Phase.JOINING, timeout=120)
    first = list(joining["status"]["instanceIds"])
    if rotate_to is not None:
        env.emulator.client.publish_eks_ami(PARAMETER, rotate_to)
    env.nodes.refuse_join(*first)
    env.nodes.join_delay = 0.5
    env.wait_check(workload, c.CheckState.READY, timeout=180)
    second = list(env.pool(pool)["status"]["instanceIds"])  # type: ignore[index]
    assert not set(first) & set(second)
    return first, second


def test_a_rotated_ami_prepares_once_before_the_next_launch(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0)
    old = eks_ami_id(REGION, DEFAULT_CLUSTER_VERSION, "x86_64", "standard")
    new = eks_ami_id(REGION, "1.35", "x86_64", "standard")  # another seeded image
    before = prepares(env)

    first, second = relaunch(env, "pool-rotated", rotate_to=new)

    assert images(env, first) == {old} and images(env, second) == {new}
    assert prepares(env) - before == 2, "one prepare for the pool, one for the rotated AMI"
    versions = template_versions(env, "pool-rotated")
    assert [v["LaunchTemplateData"]["ImageId"] for v in versions] in ([old, new], [new, old])


def test_unchanged_inputs_prepare_nothing_before_the_next_launch(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0)
    before = prepares(env)

    first, second = relaunch(env, "pool-steady", rotate_to=None)

    assert images(env, first) == images(env, second)
    assert prepares(env) - before == 1, "only the pool's first prepare"
    assert len(template_versions(env, "pool-steady")) == 1
