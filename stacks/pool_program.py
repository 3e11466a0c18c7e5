"""The per-pool inline Pulumi program: spec (+ recorded gang) in, the pool's resources out.

`pool_program` is called by the stack driver for every `up`; the Automation API runs the
function it returns inside the controller process. The program declares, in dependency
order: the instance profile and the access entry (verified or created), the optional
cluster placement group, the launch template (which needs the profile's ARN and, to create
nothing when a check fails, waits for the access entry), and — when a gang is recorded —
the instance set, which depends on all of them so that a destroy releases the gang first
(EC2 will not delete a placement group or an in-use profile under live instances).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from stacks import outputs as keys
from stacks.access_entry import AccessEntry
from stacks.aws import common_props
from stacks.instance_profile import InstanceProfile
from stacks.instance_set import InstanceSet
from stacks.launch_template import LaunchTemplate
from stacks.placement_group import PlacementGroup
from stacks.props import (
    AccessEntryInputs,
    InstanceProfileInputs,
    InstanceSetInputs,
    PlacementGroupInputs,
)
from stacks.spec import InstanceSetRecord, PoolSpec

__all__ = ["RESOURCE_NAMES", "pool_program"]

RESOURCE_NAMES = {
    "instance_profile": "instance-profile",
    "access_entry": "access-entry",
    "placement_group": "placement-group",
    "launch_template": "launch-template",
    "instance_set": "instance-set",
}


def pool_program(spec: PoolSpec, record: InstanceSetRecord | None) -> Callable[[], None]:
    """The program whose stack holds ``spec``'s pool and, if given, ``record``'s gang."""

    def program() -> None:
        conn = common_props(spec.region, spec.endpoint_url)
        profile_props: InstanceProfileInputs = {
            **conn,
            "name": spec.instance_profile_name,
            "role_arn": spec.node_role_arn,
            "cluster": spec.cluster,
            "manage": spec.manage_instance_profile,
            "extra_tags": dict(spec.extra_tags),
        }
        profile = InstanceProfile(RESOURCE_NAMES["instance_profile"], profile_props)
        entry_props: AccessEntryInputs = {
            **conn,
            "cluster": spec.cluster,
            "role_arn": spec.node_role_arn,
            "manage": spec.manage_access_entry,
            "extra_tags": dict(spec.extra_tags),
        }
        entry = AccessEntry(RESOURCE_NAMES["access_entry"], entry_props)
        depends: list[pulumi.Resource] = [profile, entry]
        group_name = spec.placement_group_name
        group_id: Any = ""
        if group_name:
            group_props: PlacementGroupInputs = {
                **conn,
                "name": group_name,
                "strategy": "cluster",
                "tags": dict(spec.tags),
            }
            placement = PlacementGroup(RESOURCE_NAMES["placement_group"], group_props)
            depends.append(placement)
            group_id = placement.group_id
        template = LaunchTemplate(
            RESOURCE_NAMES["launch_template"],
            {**conn, **spec.launch_template_props(profile.arn)},
            pulumi.ResourceOptions(depends_on=depends),
        )
        pulumi.export(keys.POOL, spec.pool)
        pulumi.export(keys.CLUSTER, spec.cluster)
        pulumi.export(keys.POOL_SPEC, spec.to_dict())
        pulumi.export(keys.LAUNCH_TEMPLATE_ID, template.launch_template_id)
        pulumi.export(keys.LAUNCH_TEMPLATE_NAME, spec.launch_template_name)
        pulumi.export(keys.LAUNCH_TEMPLATE_VERSION, template.version)
        pulumi.export(keys.INSTANCE_PROFILE_ARN, profile.arn)
        pulumi.export(keys.PLACEMENT_GROUP_NAME, group_name or "")
        pulumi.export(keys.PLACEMENT_GROUP_ID, group_id)
        group: Any = ""
        ids: Any = []
        if record is not None:
            set_props: InstanceSetInputs = {
                **conn,
                "cluster": spec.cluster,
                "pool": spec.pool,
                "group": record.group,
                "instance_ids": list(record.instance_ids),
                "release_wait_seconds": spec.release_wait_seconds,
                "poll_seconds": spec.poll_seconds,
            }
            gang = InstanceSet(
                RESOURCE_NAMES["instance_set"],
                set_props,
                pulumi.ResourceOptions(depends_on=[*depends, template]),
            )
            group, ids = gang.group, gang.instance_ids
        pulumi.export(keys.GROUP, group)
        pulumi.export(keys.INSTANCE_IDS, ids)

    return program
