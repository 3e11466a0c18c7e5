"""The inputs each pool resource is declared with: the contract between the pool program,
which builds them (`stacks.pool_program`, `PoolSpec.launch_template_props`), and the
providers, which Pulumi hands them back to as plain dicts (its `ResourceProvider` API takes
`dict[str, Any]`, and every provider's `check` refuses one missing a required key).

Pure typing: nothing here is imported by the provider host beyond the names.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = [
    "AccessEntryInputs",
    "Connection",
    "InstanceProfileInputs",
    "InstanceSetInputs",
    "LaunchTemplateInputs",
    "PlacementGroupInputs",
    "RootVolumeInputs",
]


class Connection(TypedDict):
    """Where the resource's AWS calls go: every resource carries them (`stacks.aws`)."""

    region: str
    endpoint: str  # "" for AWS's own endpoint


class InstanceProfileInputs(Connection):
    name: str
    role_arn: str
    cluster: str
    manage: bool  # create it (iam.selfManageInstanceProfile), or only verify it
    extra_tags: dict[str, str]


class AccessEntryInputs(Connection):
    cluster: str
    role_arn: str
    manage: bool  # create it (iam.manageAccessEntry), or only verify it
    extra_tags: dict[str, str]


class PlacementGroupInputs(Connection):
    name: str
    strategy: str  # cluster, spread or partition
    tags: dict[str, str]


class RootVolumeInputs(TypedDict):
    device_name: str  # the AMI's RootDeviceName
    size: int  # GiB
    type: str
    iops: NotRequired[int]
    throughput: NotRequired[int]


class LaunchTemplateInputs(TypedDict):
    """The template's own inputs; the program adds the `Connection` to them."""

    name: str
    image_id: str
    instance_type: str
    user_data: str
    # The profile resource's output in the program; its ARN where a caller builds the
    # request itself (`atomic-gang doctor`).
    instance_profile_arn: Any
    security_group_ids: list[str]
    efa_network_cards: list[int]
    efa_only: bool
    placement_group_name: str
    capacity_reservation_id: str
    capacity_reservation_kind: str
    tags: dict[str, str]
    root_volume: NotRequired[RootVolumeInputs]


class InstanceSetInputs(Connection):
    cluster: str
    pool: str
    group: str
    instance_ids: list[str]
    release_wait_seconds: float
    poll_seconds: float
