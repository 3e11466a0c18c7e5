"""What a pool's stack should hold: `PoolSpec` (the pool's infrastructure) and
`InstanceSetRecord` (the gang the engine launched), both plain, JSON-round-trippable values.

The GangNodePool reconciler builds a `PoolSpec` with `pool_spec_for` and hands it to
`StackDriver.prepare`; the driver turns spec + record into the inline program
(`stacks.pool_program.pool_program`). The spec is also exported as the stack output `poolSpec`,
so a later `record`, `remove` or `destroy` rebuilds the same program from the stack alone,
after a restart and with any backend.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from provisioner.api import constants as c
from provisioner.cloud.naming import instance_profile_name, role_name_from_arn
from provisioner.cloud.tags import format_go_duration
from stacks.props import LaunchTemplateInputs, RootVolumeInputs

if TYPE_CHECKING:
    # Only `pool_spec_for`'s caller (the controller) has them loaded; the provider host,
    # which imports this module on every engine run, needs neither pydantic nor the shape
    # parser.
    from provisioner.api.settings import Settings
    from provisioner.api.shape import GangShape

__all__ = [
    "InstanceSetRecord",
    "PoolLookups",
    "PoolSpec",
    "launch_template_name",
    "placement_group_name",
    "pool_spec_for",
]

# EC2 launch template names: up to 128 of these characters.
LAUNCH_TEMPLATE_NAME_MAX: Final = 128
_LT_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9().\-/_]")
_INSTANCE_ID: Final = re.compile(r"^i-([0-9a-f]{8}|[0-9a-f]{17})$")


def _bounded(full: str, limit: int) -> str:
    # Same rule as the instance-profile name: keep a prefix, end with a hash of the whole,
    # so two long names sharing a prefix still differ.
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[: limit - 11]}-{digest}"


def launch_template_name(cluster: str, pool: str) -> str:
    """`atomic-gang-<cluster>-<pool>`, in EC2's alphabet and length."""
    return _bounded(
        _LT_NAME_CHARS.sub("-", f"atomic-gang-{cluster}-{pool}"), LAUNCH_TEMPLATE_NAME_MAX
    )


def placement_group_name(cluster: str, pool: str) -> str:
    """`atomic-gang-<cluster>-<pool>`; EC2 allows 255 characters."""
    return _bounded(f"atomic-gang-{cluster}-{pool}", 255)


@dataclass(frozen=True)
class PoolSpec:
    """Everything a pool's stack creates or verifies, in plain values.

    ``endpoint_url`` points every AWS call at one endpoint (the local EC2 emulator); it is
    empty in production. ``tags`` go on the launch template and everything launched from it.
    ``efa_network_cards`` lists the network-card indexes that get an EFA interface (empty:
    no EFA); ``efa_only`` makes them EFA-only behind an ENA primary (see
    ``provisioner.cloud.instancetypes``). The two ``manage_*`` switches choose between
    verifying and creating.
    """

    cluster: str
    pool: str
    region: str
    node_role_arn: str
    instance_profile_name: str
    image_id: str
    instance_type: str
    user_data: str
    endpoint_url: str = ""
    manage_instance_profile: bool = False
    manage_access_entry: bool = False
    security_group_ids: tuple[str, ...] = ()
    efa_network_cards: tuple[int, ...] = ()
    efa_only: bool = False
    placement_group: bool = False
    # The reservation every launch targets ("" for none) and its kind (odcr|capacity-block),
    # as DescribeCapacityReservations reported it when the pool was prepared.
    capacity_reservation_id: str = ""
    capacity_reservation_kind: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    # The installer's extra tags alone (`instances.extraTags`), for what is tagged without
    # the pool's own tags (the instance profile and access entry, shared by pools).
    extra_tags: Mapping[str, str] = field(default_factory=dict)
    # The nodes' root volume (`instances.rootVolume`) on the AMI's root device, as
    # DescribeImages names it; "" / 0: the AMI's own mapping is left alone.
    root_device_name: str = ""
    root_volume_size: int = 0
    root_volume_type: str = ""
    root_volume_iops: int = 0
    root_volume_throughput: int = 0
    # How long the instance set's delete waits for termination and ENI detach, and how often
    # it looks. Real EC2 takes minutes; the emulator takes none.
    release_wait_seconds: float = 600.0
    poll_seconds: float = 5.0

    def differences(self, other: PoolSpec) -> list[str]:
        """The fields whose values differ from `other`'s, by name (for logs and status)."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]

    def __post_init__(self) -> None:
        for name in ("cluster", "pool", "region", "node_role_arn", "instance_type"):
            if not getattr(self, name):
                raise ValueError(f"PoolSpec.{name} must not be empty")
        if not self.user_data.strip():
            raise ValueError("PoolSpec.user_data must not be empty")
        if not self.image_id:
            raise ValueError("PoolSpec.image_id must not be empty")
        if self.release_wait_seconds <= 0 or self.poll_seconds <= 0:
            raise ValueError("release_wait_seconds and poll_seconds must be positive")

    @property
    def launch_template_name(self) -> str:
        return launch_template_name(self.cluster, self.pool)

    @property
    def placement_group_name(self) -> str | None:
        return placement_group_name(self.cluster, self.pool) if self.placement_group else None

    def launch_template_props(self, instance_profile_arn: Any) -> LaunchTemplateInputs:
        """The launch template's inputs (``stacks.launch_template``) for this spec.

        ``instance_profile_arn`` is the profile resource's output in the pool program, and
        the profile's ARN where a caller builds the request itself (``atomic-gang
        doctor``'s launch check dry-runs exactly what the stack would create)."""
        props: LaunchTemplateInputs = {
            "name": self.launch_template_name,
            "image_id": self.image_id,
            "instance_type": self.instance_type,
            "user_data": self.user_data,
            "instance_profile_arn": instance_profile_arn,
            "security_group_ids": sorted(self.security_group_ids),
            "efa_network_cards": list(self.efa_network_cards),
            "efa_only": self.efa_only,
            "placement_group_name": self.placement_group_name or "",
            "capacity_reservation_id": self.capacity_reservation_id,
            "capacity_reservation_kind": self.capacity_reservation_kind,
            "tags": dict(self.tags),
        }
        if self.root_device_name:
            props["root_volume"] = self.root_volume()
        return props

    def root_volume(self) -> RootVolumeInputs:
        """The root volume's settings for the launch template (`stacks.launch_template`)."""
        volume: RootVolumeInputs = {
            "device_name": self.root_device_name,
            "size": self.root_volume_size,
            "type": self.root_volume_type,
        }
        if self.root_volume_iops:
            volume["iops"] = self.root_volume_iops
        if self.root_volume_throughput:
            volume["throughput"] = self.root_volume_throughput
        return volume

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["security_group_ids"] = list(self.security_group_ids)
        data["efa_network_cards"] = list(self.efa_network_cards)
        data["tags"] = dict(self.tags)
        data["extra_tags"] = dict(self.extra_tags)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolSpec:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["security_group_ids"] = tuple(known.get("security_group_ids") or ())
        known["efa_network_cards"] = tuple(int(n) for n in known.get("efa_network_cards") or ())
        known["tags"] = dict(known.get("tags") or {})
        known["extra_tags"] = dict(known.get("extra_tags") or {})
        return cls(**known)


@dataclass(frozen=True)
class InstanceSetRecord:
    """The gang of one acquisition: its group and the instance ids EC2 returned."""

    group: str
    instance_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.group:
            raise ValueError("an instance set needs its group")
        if not self.instance_ids:
            raise ValueError("an instance set holds at least one instance")
        bad = [i for i in self.instance_ids if not _INSTANCE_ID.match(i)]
        if bad:
            raise ValueError(f"not EC2 instance ids: {bad}")
        if len(set(self.instance_ids)) != len(self.instance_ids):
            raise ValueError("an instance set lists each instance once")
        # Sorted, so the same gang always diffs as "no change".
        object.__setattr__(self, "instance_ids", tuple(sorted(self.instance_ids)))


def pool_tags(
    cluster: str, pool: str, max_lifetime: timedelta, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The tags every resource of a pool carries (the group tag is added per launch): the
    installer's extra tags, then the pool's own, which the settings keep apart."""
    return {
        **(extra or {}),
        c.TAG_MANAGED: "true",
        c.TAG_CLUSTER: cluster,
        c.TAG_POOL: pool,
        c.TAG_MAX_LIFETIME: format_go_duration(max_lifetime),
        c.cluster_ownership_tag(cluster): "owned",
    }


@dataclass(frozen=True)
class PoolLookups:
    """What the reconciler looks up before it builds a pool's spec: the AMI, the user data
    (``Ec2Engine.render_user_data``), the security groups (from the cluster), the EFA cards
    (from ``Ec2Engine.instance_type``), whether the shape asks a cluster placement group,
    the reservation's kind (from ``Ec2Engine.reservation``) and the AMI's root device
    (DescribeImages' RootDeviceName, read only when `instances.rootVolume` is set)."""

    image_id: str
    user_data: str
    security_group_ids: Sequence[str] = ()
    efa_network_cards: Sequence[int] = ()
    efa_only: bool = False
    placement_group: bool = False
    capacity_reservation_kind: str = ""
    root_device_name: str = ""


def pool_spec_for(settings: Settings, shape: GangShape, lookups: PoolLookups) -> PoolSpec:
    """The spec of ``shape``'s pool under ``settings``: what the reconciler looked up
    (``lookups``) and what follows from the settings and the shape."""
    volume = settings.instances.root_volume
    if volume is not None and not lookups.root_device_name:
        raise ValueError("instances.rootVolume needs the AMI's root device name")
    extra = dict(settings.instances.extra_tags)
    profile = instance_profile_name(settings.cluster_name, role_name_from_arn(shape.node_role_arn))
    return PoolSpec(
        cluster=settings.cluster_name,
        pool=shape.pool,
        region=shape.region,
        endpoint_url=settings.aws.endpoint_url or "",
        node_role_arn=shape.node_role_arn,
        instance_profile_name=profile,
        manage_instance_profile=settings.iam.self_manage_instance_profile,
        manage_access_entry=settings.iam.manage_access_entry,
        image_id=lookups.image_id,
        instance_type=shape.instance_type,
        user_data=lookups.user_data,
        security_group_ids=tuple(sorted(lookups.security_group_ids)),
        efa_network_cards=tuple(lookups.efa_network_cards),
        efa_only=lookups.efa_only and bool(lookups.efa_network_cards),
        placement_group=lookups.placement_group,
        capacity_reservation_id=shape.capacity_reservation_id or "",
        capacity_reservation_kind=(
            lookups.capacity_reservation_kind if shape.capacity_reservation_id else ""
        ),
        tags=pool_tags(settings.cluster_name, shape.pool, shape.max_lifetime, extra),
        extra_tags=extra,
        root_device_name=lookups.root_device_name if volume is not None else "",
        root_volume_size=volume.volume_size if volume is not None else 0,
        root_volume_type=volume.volume_type if volume is not None else "",
        root_volume_iops=(volume.iops or 0) if volume is not None else 0,
        root_volume_throughput=(volume.throughput or 0) if volume is not None else 0,
    )
