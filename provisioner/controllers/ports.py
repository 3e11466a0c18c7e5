"""The two outside systems the pool reconciler and the reaper drive, as small interfaces.

`EngineOps` is the part of `provisioner.cloud.Ec2Engine` they call; `StackOps` the part of
the Pulumi stack driver. Production passes the real objects; tests pass the same real
objects against the emulator and a file backend, or small fakes for pure logic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceTypeInfo,
    InstanceView,
    LaunchResult,
    LaunchSpec,
    Mode,
    ReleaseReport,
    SubnetRef,
)


class EngineOps(Protocol):
    def acquire(self, spec: LaunchSpec) -> LaunchResult: ...

    def describe(self, instance_ids: Sequence[str]) -> list[InstanceView]: ...

    def find_managed(
        self, cluster: str, pool: str | None = None, group: str | None = None
    ) -> list[InstanceView]: ...

    def release(self, instance_ids: Sequence[str]) -> ReleaseReport: ...

    def set_keep_warm_tag(self, instance_ids: Sequence[str], until: datetime | None) -> None: ...

    def cluster(self, name: str) -> ClusterInfo: ...

    def instance_type(self, instance_type: str) -> InstanceTypeInfo: ...

    def resolve_ami(
        self,
        *,
        k8s_version: str,
        instance_type: str,
        variant: str,
        explicit_ami_id: str | None = None,
    ) -> AmiChoice: ...

    def plan_subnets(
        self,
        *,
        mode: Mode,
        cluster: ClusterInfo,
        explicit_subnet_ids: Sequence[str] = (),
        availability_zones: Sequence[str] = (),
    ) -> tuple[SubnetRef, ...]: ...


class StackOps(Protocol):
    """One pool's Pulumi stack. Every call is serialized per pool by the caller."""

    def is_prepared(self, pool: str) -> bool:
        """Whether the stack holds the pool's prerequisites — cheap, runs no CLI."""
        ...

    def outputs(self, pool: str) -> Mapping[str, Any]: ...

    def prepare(self, spec: Any) -> Mapping[str, Any]: ...

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None: ...

    def remove_instance_set(self, pool: str) -> None: ...

    def destroy(self, pool: str) -> None: ...

    def recover(self) -> None:
        """After a crash: cancel stale locks, resolve pending operations (new leader only)."""
        ...

    def step_down(self) -> None:
        """Leadership lost: from now on break no stack lock (the new leader's)."""
        ...
