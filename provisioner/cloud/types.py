"""The engine's own input and output types; no SDK type crosses this line.

Called by the GangNodePool reconciler and the reaper, which build a :class:`LaunchSpec` from
the pool's shape and read back :class:`LaunchResult`, :class:`InstanceView` and
:class:`ReleaseReport`; and by every module in ``provisioner.cloud``, which turns AWS
dictionaries into these at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from provisioner.api import constants as c
from provisioner.cloud import naming

Mode = Literal["runinstances", "fleet"]
ReservationKind = Literal["odcr", "capacity-block"]
MatchCriteria = Literal["open", "targeted"]
AmiVariant = Literal["standard", "nvidia", "neuron"]
Architecture = Literal["x86_64", "arm64"]


@dataclass(frozen=True)
class SubnetRef:
    subnet_id: str
    availability_zone: str


@dataclass(frozen=True)
class InstanceProfileRef:
    """The node instance profile, by ARN (preferred: no name lookup on EC2's side) or name."""

    name: str | None = None
    arn: str | None = None

    def __post_init__(self) -> None:
        if not self.name and not self.arn:
            raise ValueError("an instance profile needs a name or an ARN")


@dataclass(frozen=True)
class LaunchTemplateRef:
    """The pool's launch template by id, or by name where its id is not known yet
    (`atomic-gang doctor` before the pool's first prepare: EC2 takes either)."""

    template_id: str | None
    version: str = "$Latest"
    name: str | None = None

    def __post_init__(self) -> None:
        if not self.template_id and not self.name:
            raise ValueError("a launch template needs an id or a name")

    def specification(self) -> dict[str, str]:
        """The request's LaunchTemplate (RunInstances) or LaunchTemplateSpecification
        (CreateFleet)."""
        if self.template_id:
            return {"LaunchTemplateId": self.template_id, "Version": self.version}
        return {"LaunchTemplateName": str(self.name), "Version": self.version}


@dataclass(frozen=True)
class CapacityReservationRef:
    """An On-Demand Capacity Reservation (``odcr``) or a Capacity Block, by id.

    Callers name the id only; ``Ec2Engine.acquire`` replaces the ref with the one EC2's own
    record gives (:meth:`Reservation.ref`: kind and zone), so a launch never guesses them.
    """

    reservation_id: str
    kind: ReservationKind | None = None
    availability_zone: str | None = None


@dataclass(frozen=True)
class Reservation:
    """A capacity reservation as DescribeCapacityReservations reports it.

    ``kind`` is ``capacity-block`` for EC2's ReservationType ``capacity-block`` and ``odcr``
    otherwise. ``start``/``end`` bound a Capacity Block's window (an ODCR may have neither).
    """

    reservation_id: str
    kind: ReservationKind
    instance_type: str
    availability_zone: str
    total: int
    available: int
    state: str
    start: datetime | None
    end: datetime | None
    match_criteria: MatchCriteria
    # An ODCR made inside a cluster placement group is usable only from that group.
    placement_group_name: str | None = None

    def ref(self) -> CapacityReservationRef:
        return CapacityReservationRef(self.reservation_id, self.kind, self.availability_zone)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything one N-or-0 launch needs; the controller maps the pool's shape onto it.

    ``subnets`` is the ordered plan from ``subnets.plan_subnets``: the sweep order for
    runinstances, the prioritized overrides for fleet. ``user_data`` is plain text (the SDK
    base64-encodes it). In fleet mode user data, ENIs and the reservation target come from
    ``launch_template``; ``ami_id`` and ``placement_group_name`` still override it.
    """

    pool_name: str
    pool_uid: str
    acquire_generation: int
    cluster_name: str
    count: int
    instance_type: str
    mode: Mode
    subnets: tuple[SubnetRef, ...]
    ami_id: str | None = None
    instance_profile: InstanceProfileRef | None = None
    security_group_ids: tuple[str, ...] = ()
    user_data: str | None = None
    max_lifetime: timedelta = timedelta(hours=4)
    extra_tags: Mapping[str, str] = field(default_factory=dict)
    capacity_reservation: CapacityReservationRef | None = None
    efa: bool = False
    placement_group_name: str | None = None
    launch_template: LaunchTemplateRef | None = None
    # The zones or subnets the Job named (empty: the cluster's subnets were planned). Only
    # for messages: a reservation in another zone contradicts them, which the user must fix.
    explicit_placement: tuple[str, ...] = ()
    # Instances on a Capacity Block are released this long before its end; a block ending
    # sooner than that is not launched into.
    block_release_margin: timedelta = timedelta(0)
    # EC2's answers the caller read this pass (DescribeCapacityReservations for
    # ``capacity_reservation``, DescribeInstanceTypes for ``efa``); None: the engine reads them.
    reservation: Reservation | None = None
    instance_type_info: InstanceTypeInfo | None = None
    # The cluster's key that signs launch tokens (``naming``); the engine sets its own.
    ownership_key: naming.OwnershipKey | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if self.mode not in c.MODES:
            raise ValueError(f"mode must be one of {c.MODES}, got {self.mode!r}")
        if not self.subnets:
            raise ValueError("a launch needs at least one subnet")
        if self.max_lifetime <= timedelta(0):
            raise ValueError("max_lifetime must be positive")
        if not self.pool_uid:
            raise ValueError("a launch needs the pool's UID (client tokens derive from it)")
        if self.acquire_generation < 0:
            raise ValueError(f"acquire generation must be >= 0, got {self.acquire_generation}")

    @property
    def group(self) -> str:
        return naming.group_name(self.acquire_generation)

    def client_token(self, discriminator: str) -> str:
        """This generation's launch token for ``discriminator`` (a subnet id, or "fleet"),
        signed for this cluster and pool when there is an ownership key."""
        return naming.client_token(
            self.pool_uid,
            self.acquire_generation,
            discriminator,
            key=self.ownership_key,
            cluster=self.cluster_name,
            pool=self.pool_name,
        )

    def request_tokens(self) -> tuple[str, ...]:
        """The ClientTokens a launch of this spec sends, in the order it may send them:
        fleet mode one CreateFleet (``naming.FLEET_DISCRIMINATOR``), runinstances mode one
        RunInstances per subnet of the sweep (a try that succeeds ends it)."""
        if self.mode == c.MODE_FLEET:
            return (self.client_token(naming.FLEET_DISCRIMINATOR),)
        return tuple(self.client_token(s.subnet_id) for s in self.subnets)


@dataclass(frozen=True)
class LaunchAttempt:
    """One request sent while acquiring: where, with which token, and how it ended."""

    client_token: str
    subnet: SubnetRef | None
    error_code: str | None = None


@dataclass(frozen=True)
class LaunchResult:
    """Exactly N instances, as EC2 returned them (or as found already launched)."""

    instance_ids: tuple[str, ...]
    mode: Mode
    group: str
    client_token: str | None
    subnets: tuple[SubnetRef, ...]
    reservation_id: str | None = None
    fleet_id: str | None = None
    adopted: bool = False
    attempts: tuple[LaunchAttempt, ...] = ()
    # When the gang runs on a Capacity Block: the block's end, when EC2 reclaims it.
    capacity_block_ends_at: datetime | None = None

    @property
    def availability_zones(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.availability_zone for s in self.subnets))


@dataclass(frozen=True)
class ManagedTags:
    """Our tags on an instance, parsed; ``None`` where a tag is absent or unreadable."""

    managed: bool
    cluster: str | None
    pool: str | None
    group: str | None
    max_lifetime: timedelta | None
    keep_warm_until: datetime | None


@dataclass(frozen=True)
class EniAttachment:
    instance_id: str | None
    device_index: int
    network_card_index: int
    delete_on_termination: bool
    status: str

    @property
    def is_primary(self) -> bool:
        return self.device_index == 0 and self.network_card_index == 0


@dataclass(frozen=True)
class NetworkInterfaceView:
    eni_id: str
    status: str
    description: str
    subnet_id: str | None
    interface_type: str
    attachment: EniAttachment | None


@dataclass(frozen=True)
class InstanceView:
    instance_id: str
    state: str
    instance_type: str
    availability_zone: str | None
    subnet_id: str | None
    launch_time: datetime | None
    private_dns_name: str | None
    private_ip: str | None
    client_token: str | None
    tags: Mapping[str, str]
    managed: ManagedTags
    network_interfaces: tuple[NetworkInterfaceView, ...] = ()
    # EC2's StateTransitionReason; a terminated instance's carries when it ended (billing).
    state_reason: str | None = None

    @property
    def provider_id(self) -> str | None:
        """The Kubernetes providerID a Node for this instance carries."""
        if not self.availability_zone:
            return None
        return f"aws:///{self.availability_zone}/{self.instance_id}"


@dataclass(frozen=True)
class ReleaseReport:
    """What a release did. ``complete`` is False while an ENI is still waiting to detach;
    ``all_gone`` is False while an instance is not yet confirmed terminating."""

    requested: tuple[str, ...]
    terminated: tuple[str, ...]
    already_gone: tuple[str, ...]
    enis_recorded: tuple[str, ...]
    enis_recovered: tuple[str, ...]
    enis_deleted: tuple[str, ...]
    enis_pending: tuple[str, ...]
    # Instances EC2 has not yet shown, asked by id, shutting-down or terminated: they may
    # still run, so whoever released them keeps their ids and releases them again.
    unconfirmed: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.enis_pending

    @property
    def all_gone(self) -> bool:
        """EC2 listed every requested instance by id as shutting-down or terminated."""
        return not self.unconfirmed


@dataclass(frozen=True)
class ClusterInfo:
    """What nodes need to join an EKS cluster, and where they may live."""

    name: str
    arn: str | None
    status: str
    version: str
    endpoint: str
    certificate_authority: str
    service_cidr: str
    vpc_id: str | None
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True)
class InstanceTypeInfo:
    instance_type: str
    architectures: tuple[str, ...]
    efa_supported: bool
    max_efa_interfaces: int
    network_card_indexes: tuple[int, ...]
    # The cards whose InterfaceTypes (DescribeInstanceTypes) include `efa-only`.
    efa_only_cards: tuple[int, ...] = ()


@dataclass(frozen=True)
class RootDevice:
    """An AMI's root device as DescribeImages reports it: its ``RootDeviceName`` and the
    size of the snapshot mapped there (None when the image does not say)."""

    image_id: str
    device_name: str
    snapshot_size_gib: int | None = None


@dataclass(frozen=True)
class AmiChoice:
    """Which AMI a launch uses and where it came from (``explicit`` or ``ssm``)."""

    ami_id: str
    source: Literal["explicit", "ssm"]
    parameter_name: str | None = None
    architecture: Architecture | None = None
