"""The EC2 engine's contract: the calls the controllers make, declared once.

`Ec2Engine` (`cloud.engine`) implements it against AWS and says so by subclassing it, as
the unit tests' `tests.support.fake_engine.FakeEngine` does in memory, so mypy checks both
against this one declaration. The pool reconciler, the instance index and the reaper take
an `EngineOps` (re-exported by `controllers.ports`) in their constructors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from provisioner.api.ami_policy import ImageOwners
from provisioner.api.pod_fit import InstanceTypes
from provisioner.cloud.block_offerings import CapacityBlockOffering
from provisioner.cloud.leftovers import Leftover
from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceTypeInfo,
    InstanceView,
    LaunchResult,
    LaunchSpec,
    Mode,
    ReleaseReport,
    Reservation,
    RootDevice,
    SubnetRef,
)
from provisioner.cloud.views import LIVE_STATES

__all__ = ["EngineOps"]


class EngineOps(Protocol):
    """What the controllers call on EC2: acquire, watch and release gangs, and the answers
    a pool's preparation reads. Every method returns the project's own types or raises a
    `CloudError` whose kind says what to do next."""

    def acquire(self, spec: LaunchSpec) -> LaunchResult: ...

    def launch_tokens(self, spec: LaunchSpec) -> tuple[str, ...]:
        """The ClientTokens `acquire(spec)` sends EC2 if it launches, in the order it sends
        them (signed with the engine's ownership key; the first is the first EC2 receives):
        what the pool's launch marker records before the launch."""
        ...

    def describe(self, instance_ids: Sequence[str]) -> list[InstanceView]: ...

    def find_managed(
        self,
        cluster: str,
        pool: str | None = None,
        group: str | None = None,
        states: Sequence[str] = LIVE_STATES,
    ) -> list[InstanceView]: ...

    def release(
        self, instance_ids: Sequence[str], *, known_since: datetime | None = None
    ) -> ReleaseReport: ...

    def fleet_tokens(self, fleet_ids: Iterable[str]) -> dict[str, str | None]: ...

    def set_keep_warm_tag(self, instance_ids: Sequence[str], until: datetime | None) -> None: ...

    def leftovers(self, cluster: str, pool: str | None = None) -> list[Leftover]: ...

    def delete_leftovers(self, items: list[Leftover]) -> list[Leftover]: ...

    def cluster(self, name: str) -> ClusterInfo: ...

    def instance_type(self, instance_type: str) -> InstanceTypeInfo: ...

    def reservation(self, reservation_id: str) -> Reservation: ...

    def capacity_block_offerings(
        self,
        instance_type: str,
        count: int,
        duration_hours: int,
        *,
        earliest_start: datetime | None = None,
        latest_end: datetime | None = None,
    ) -> list[CapacityBlockOffering]:
        """The Capacity Blocks EC2 offers for `count` x `instance_type` for `duration_hours`
        (a duration EC2 sells, `block_offerings.ALLOWED_DURATION_HOURS`), starting no
        earlier than `earliest_start` and ending by `latest_end`, soonest first."""
        ...

    def purchase_capacity_block(self, offering_id: str, tags: Mapping[str, str]) -> str:
        """Buy the offering, tagged `tags`, in ONE attempt (no ClientToken exists); the new
        reservation's id. `block_purchase.BlockPurchaseRefused` when EC2 refused it (nothing
        bought); any other `CloudError` leaves the purchase unknown."""
        ...

    def bought_block(self, cluster: str, intent: str) -> str | None:
        """The reservation EC2 lists tagged with the purchase `intent` for `cluster`."""
        ...

    @property
    def instance_types(self) -> InstanceTypes:
        """What one node of a type offers pods, as EC2 says (`api.pod_fit`)."""
        ...

    @property
    def images(self) -> ImageOwners:
        """Who owns an AMI, as EC2 says (for a Job's own ami-id, `api.ami_policy`)."""
        ...

    def root_device(self, image_id: str) -> RootDevice:
        """The AMI's root device (DescribeImages' RootDeviceName), for `instances.rootVolume`."""
        ...

    def resolve_ami(
        self,
        *,
        k8s_version: str,
        instance_type: str,
        variant: str,
        explicit_ami_id: str | None = None,
        instance_type_info: InstanceTypeInfo | None = None,
    ) -> AmiChoice: ...

    def plan_subnets(
        self,
        *,
        mode: Mode,
        cluster: ClusterInfo,
        explicit_subnet_ids: Sequence[str] = (),
        availability_zones: Sequence[str] = (),
        addresses_needed: int = 0,
    ) -> tuple[SubnetRef, ...]: ...
