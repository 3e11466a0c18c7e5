"""The two outside systems the pool reconciler and the reaper drive, as small interfaces.

`EngineOps` is the part of `provisioner.cloud.Ec2Engine` they call; `StackOps` is the
stack room's port (`provisioner.pulumi_driver.port.PoolStacks`): a `PoolSpec` in, typed
`PoolOutputs` out, and `StackError` with a `FailureKind` as the only failure. Production
passes the real objects; tests pass the same real objects against the emulator and a file
backend, or small fakes for pure logic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from provisioner.api.ami_policy import ImageOwners
from provisioner.api.pod_fit import InstanceTypes
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
from provisioner.pulumi_driver.port import PoolOutputs, PoolSpec, PreparedStack


class EngineOps(Protocol):
    def acquire(self, spec: LaunchSpec) -> LaunchResult: ...

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


class StackOps(Protocol):
    """One pool's Pulumi stack. Every call is serialized per pool by the caller; every
    failure is a `StackError` carrying its `FailureKind`."""

    def is_prepared(self, pool: str) -> bool:
        """Whether the stack holds the pool's prerequisites — cheap, runs no CLI."""
        ...

    def outputs(self, pool: str) -> PoolOutputs | None: ...

    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> PreparedStack:
        """``refresh_first``: a launch met a resource of the stack gone from AWS; the
        stack is refreshed and the resource made again (said in `PreparedStack.repairs`)."""
        ...

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None: ...

    def remove_instance_set(self, pool: str) -> None: ...

    def destroy(self, pool: str) -> None: ...

    def recover(self) -> None:
        """On leading: cancel locks whose holder cannot still write, resolve pending
        operations (new leader only)."""
        ...

    def step_down(self) -> None:
        """Leadership lost: running stack operations are killed; from now on no stack is
        written and no lock broken."""
        ...
