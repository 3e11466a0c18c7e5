"""Controller settings: one frozen pydantic model tree, its defaults and its validation.

Every part of the controller is handed one `Settings`; tests build `Settings(...)`
directly and never see the environment. The file, environment and flags that fill it at
start-up are read in `settings_sources`. Each section accepts the chart's camelCase
spelling (`clusterName`, `defaults.keepWarmTTL`) as well as the Python field names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_snake

from provisioner.api import constants as c
from provisioner.api.fields import (
    GoDuration,
    Mode,
    NonNegativeDuration,
    PositiveDuration,
    Region,
    RoleArn,
)

__all__ = [
    "AwsSettings",
    "Defaults",
    "IamSettings",
    "LeaderElection",
    "Limits",
    "PulumiSettings",
    "RetryBackoff",
    "Settings",
    "StackOperations",
    "WebhookSettings",
    "default_stack_workers",
    "memory_limit",
    "snake_keys",
]

_INSTANCE_TYPE_GLOB = re.compile(r"^[a-z0-9.-]+\*?$|^\*$")
_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"
_DEFAULT_STATE_DIR: Final = Path("/var/lib/atomic-gang/pulumi")

Port = Annotated[int, Field(ge=1, le=65535)]


def snake_keys(value: Any) -> Any:
    """Rename mapping keys from the chart's camelCase to field names, all the way down."""
    if isinstance(value, Mapping):
        return {to_snake(str(k)): snake_keys(v) for k, v in value.items()}
    return value


class _Section(BaseModel):
    # Unknown keys are refused: a misspelt setting silently falling back to its default is
    # the kind of mistake that surfaces as a bill.
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _chart_spelling(cls, data: Any) -> Any:
        return snake_keys(data)


class Defaults(_Section):
    region: Region = Field(description="EKS cluster region; the only launch region.")
    mode: Mode = Field(default=c.MODE_RUNINSTANCES, description="Default acquisition mode.")
    keep_warm_ttl: NonNegativeDuration = Field(
        default=timedelta(minutes=10), description="Default idle-node retention window."
    )
    max_lifetime: PositiveDuration = Field(
        default=timedelta(hours=4), description="Default instance age cap."
    )
    node_role_arn: RoleArn | Literal[""] = Field(
        default="", description="Default node IAM role ARN; empty when every Job names its own."
    )


class Limits(_Section):
    max_gang_size: int = Field(default=64, ge=1, description="Largest count any Job may request.")
    max_keep_warm_ttl: NonNegativeDuration = Field(
        default=timedelta(hours=24), description="Longest keep-warm TTL any Job may request."
    )


class LeaderElection(_Section):
    enabled: bool = Field(default=True, description="Keep one active replica through a Lease.")
    lease_name: str = Field(default="atomic-gang-provisioner", min_length=1)
    lease_namespace: str = Field(default="atomic-gang-system", min_length=1)
    lease_duration: GoDuration = timedelta(seconds=15)
    renew_deadline: GoDuration = timedelta(seconds=10)
    retry_period: GoDuration = timedelta(seconds=2)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        # The leader must give up before a follower may take over, or two replicas act.
        if not timedelta(0) < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retryPeriod < renewDeadline < leaseDuration"
            )
        return self


class RetryBackoff(_Section):
    """How long a pool waits before its next try after a failed acquisition step.

    The wait doubles per consecutive failure, from `initial` up to `max`. Capacity
    shortfalls cost nothing while waiting (no instance is held), so a short `initial` only
    spends API calls; it lets a gang catch a short capacity window that a long wait would
    sleep through. `max` bounds how long a pool may sleep once capacity comes back.
    """

    initial: GoDuration = Field(
        default=timedelta(seconds=5), description="Wait after the first failure."
    )
    max: GoDuration = Field(default=timedelta(minutes=5), description="Longest wait.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not timedelta(0) < self.initial <= self.max:
            raise ValueError(
                "retryBackoff needs 0 < initial <= max, e.g. {initial: 5s, max: 5m}; got "
                f"initial={self.initial.total_seconds():g}s max={self.max.total_seconds():g}s"
            )
        return self


def _backend_url(pulumi: Mapping[str, Any]) -> str:
    """The backend the settings name, or file://<stateDir> when they opt into ephemeral
    state. A file backend lives on one replica's disk and dies with it, so it is never
    chosen for the user by an empty value."""
    url = str(pulumi.get("backend_url") or "")
    ephemeral = str(pulumi.get("ephemeral_state")).lower() in ("true", "1", "yes")
    file_url = f"file://{pulumi.get('state_dir') or _DEFAULT_STATE_DIR}"
    if url and ephemeral and url != file_url:  # the latter: settings dumped and read again
        raise ValueError(
            f"pulumi.ephemeralState=true and pulumi.backendUrl={url} contradict each other: "
            "unset one"
        )
    if url:
        return url
    if ephemeral:
        return file_url
    raise ValueError(
        "pulumi.backendUrl is required: the durable backend every pool's Pulumi stack lives "
        "in, shared by all replicas, e.g. s3://<bucket>?region=<region> (the bootstrap's "
        "stackBackendUrl output). For a throwaway controller that may lose its stacks with "
        "its disk, set pulumi.ephemeralState=true instead"
    )


class PulumiSettings(_Section):
    state_dir: Path = Field(
        default=_DEFAULT_STATE_DIR, description="Work and file-backend directory."
    )
    backend_url: str = Field(
        default="",
        description="The durable backend every pool's stack lives in, e.g. s3://<bucket>?region=…; "
        "required unless ephemeralState.",
    )
    ephemeral_state: bool = Field(
        default=False,
        description="Keep the stacks in file://<stateDir> instead (lost with the disk); the "
        "chart's pulumi.ephemeralState.",
    )
    secrets_provider: str = Field(default="passphrase", min_length=1, description="e.g. awskms://…")
    project_name: str = Field(default="", description="Default atomic-gang-<clusterName>.")

    @model_validator(mode="after")
    def _check_project(self) -> Self:
        if self.project_name and not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", self.project_name):
            raise ValueError(
                f"pulumi.projectName {self.project_name!r} may hold only letters, digits, "
                "'-', '_' and '.'"
            )
        return self


def _cpu_count() -> int:
    """CPUs this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# Where a container's memory limit is read: cgroup v2, then v1. A v1 group without a limit
# reads as a huge number, which the arithmetic below turns into no bound.
CGROUP_MEMORY_LIMITS: Final = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
# Sizing of the stack-operation executor (see `default_stack_workers`). A Pulumi operation
# spends most of its time waiting on AWS and the state bucket (0.57 CPU-s of a 2.8 s `up`
# in the 200-pool benchmark), so a CPU keeps two busy. Each one in flight is a Pulumi CLI
# with its engine: in `bench_scale` at 200 pools with four at once, the controller's process
# group peaked at 931 MiB beside the controller's own 270 and the shared provider host's
# 95, about 140 MiB an operation. The controller and that host are kept 400 MiB.
STACK_OPERATIONS_PER_CPU: Final = 2
STACK_OPERATION_MEMORY: Final = 150 * 2**20
CONTROLLER_MEMORY: Final = 400 * 2**20


def memory_limit(paths: Sequence[Path] = CGROUP_MEMORY_LIMITS) -> int | None:
    """This container's memory limit in bytes, or None when there is none to read."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None  # v2 writes "max" for no limit
    return None


def default_stack_workers(cpus: int | None = None, memory: int | None = None) -> int:
    """Two stack operations per CPU, no more than the memory limit holds beside the
    controller, and at least one. The memory bound is what keeps a controller scheduled on
    a large node under the chart's 1 GiB limit from being OOM-killed mid-`up`."""
    by_cpu = STACK_OPERATIONS_PER_CPU * (cpus if cpus is not None else _cpu_count())
    if memory is None:
        return by_cpu
    by_memory = (memory - CONTROLLER_MEMORY) // STACK_OPERATION_MEMORY
    return max(1, min(by_cpu, by_memory))


class StackOperations(_Section):
    """The executor that runs Pulumi operations (prepare, record, remove a set, destroy)
    apart from the reconcile workers, so no pool's events wait behind another pool's `up`.

    Each operation is mostly a Pulumi CLI process and its engine waiting on AWS and the
    state bucket; the default (`default_stack_workers`) keeps two per CPU, bounded by the
    container's memory limit.
    """

    workers: int = Field(
        default_factory=lambda: default_stack_workers(memory=memory_limit()),
        description=(
            "Pulumi operations run at once, one pool each (default: two per CPU, no more "
            "than the container's memory limit holds at 150 MiB each beside 400 MiB for "
            "the controller)."
        ),
    )

    idle_stack_ttl: NonNegativeDuration = Field(
        default=timedelta(days=7),
        description=(
            "How long a released pool keeps its prepared stack (launch template, placement "
            "group) for the next claim before the stack is destroyed; 0 destroys it with "
            "the set."
        ),
    )

    provider_host: Literal["shared", "perOperation"] = Field(
        default="shared",
        description=(
            "shared: one long-lived host process serves the stacks' dynamic providers to "
            "every `up` and `destroy` (the CLI attaches to it); perOperation: the CLI starts "
            "a Python provider host for each, as Pulumi does by default (about twice the CPU)."
        ),
    )

    @field_validator("workers")
    @classmethod
    def _at_least_one(cls, v: int) -> int:
        if v < 1:
            raise ValueError(
                f"stackOperations.workers must be at least 1 (got {v}): with no worker no "
                "pool's stack is ever prepared, recorded or destroyed; leave it unset for "
                "two per CPU within the memory limit"
            )
        return v


class AwsSettings(_Section):
    endpoint_url: str | None = Field(
        default=None, pattern=r"^https?://", description="EC2/EKS/SSM/IAM endpoint override."
    )


class WebhookSettings(_Section):
    enabled: bool = Field(
        default=True, description="Serve the validating Job webhook (on every replica)."
    )
    cert_dir: Path = Field(
        default=Path("/run/secrets/atomic-gang/webhook"),
        description="Directory holding tls.crt and tls.key (the chart mounts them here).",
    )


class IamSettings(_Section):
    self_manage_instance_profile: bool = Field(
        default=False, description="Create the node instance profile instead of only verifying it."
    )
    manage_access_entry: bool = Field(
        default=False,
        description="Create the node role's EKS access entry instead of verifying it.",
    )


class Settings(_Section):
    """Everything the controller is told at start-up. Build it directly in tests."""

    cluster_name: str = Field(pattern=_CLUSTER_NAME, description="EKS cluster nodes join.")
    defaults: Defaults
    limits: Limits = Limits()
    allowed_instance_types: tuple[str, ...] = Field(
        default=(),
        description="Instance-type allowlist, exact or trailing-* glob; empty allows any.",
    )
    allowed_node_role_arns: tuple[RoleArn, ...] = Field(
        default=(), description="Node-role allowlist; empty allows only defaults.nodeRoleArn."
    )
    acquire_attempts_before_retry: int = Field(default=20, ge=1)
    join_deadline_seconds: int = Field(default=600, ge=1)
    capacity_block_release_seconds: int = Field(
        default=2100,
        # EC2 starts terminating a block's instances 30 minutes before its end ("Work with
        # Capacity Blocks"): a planned release any later would race EC2's own reclaim.
        ge=1800,
        description="Release a gang this long before its Capacity Block ends; at least 1800 "
        "(EC2 starts terminating a block's instances 30 minutes before the end).",
    )
    reap_interval_seconds: int = Field(default=120, ge=1)
    instance_index_refresh_seconds: int = Field(
        default=10,
        ge=1,
        description="How old the shared DescribeInstances listing that joining pools and "
        "pools in a steady phase (Idle, Satisfied, KeepWarm) read may grow: the bound on "
        "noticing that EC2 lost an instance of a joining, running or warm set. Between full "
        "listings, one every 6 intervals, only the instances not running are listed. Pools "
        "about to act on their instances always read EC2 directly.",
    )
    max_concurrent_pool_reconciles: int = Field(default=5, ge=1)
    retry_backoff: RetryBackoff = RetryBackoff()
    integration_mode: str = Field(default=c.INTEGRATION_ADMISSIONCHECK)
    controller_name: str = Field(default=c.CONTROLLER_NAME, min_length=1, max_length=253)
    leader_election: LeaderElection = LeaderElection()
    metrics_port: Port = 8080
    health_port: Port = 8081
    webhook_port: Port = 9443
    pulumi: PulumiSettings = PulumiSettings()
    stack_operations: StackOperations = StackOperations()
    aws: AwsSettings = AwsSettings()
    iam: IamSettings = IamSettings()
    webhook: WebhookSettings = WebhookSettings()

    @model_validator(mode="before")
    @classmethod
    def _derive_pulumi_defaults(cls, data: Any) -> Any:
        data = snake_keys(data)
        if not isinstance(data, dict):
            return data
        pulumi = data.get("pulumi") or {}
        if isinstance(pulumi, PulumiSettings):
            pulumi = pulumi.model_dump(exclude_unset=True)
        if isinstance(pulumi, Mapping):
            pulumi = dict(pulumi)
            pulumi["backend_url"] = _backend_url(pulumi)
            if not pulumi.get("project_name") and isinstance(data.get("cluster_name"), str):
                pulumi["project_name"] = f"atomic-gang-{data['cluster_name']}"
            data = {**data, "pulumi": pulumi}
        return data

    @field_validator("integration_mode")
    @classmethod
    def _only_admissioncheck(cls, v: str) -> str:
        if v != c.INTEGRATION_ADMISSIONCHECK:
            raise ValueError(
                f"integrationMode {v!r} is not supported; use {c.INTEGRATION_ADMISSIONCHECK!r}. "
                "Watching Jobs directly cannot stop their pods from being created before the "
                "nodes exist, so the controller gates admission through a Kueue AdmissionCheck."
            )
        return v

    @field_validator("allowed_instance_types")
    @classmethod
    def _globs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in v if not _INSTANCE_TYPE_GLOB.match(p)]
        if bad:
            raise ValueError(
                f"allowedInstanceTypes entries {bad} are not instance types or trailing-* "
                'globs such as "p4d.24xlarge" or "p5.*"'
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        d = self.defaults
        if not d.node_role_arn and not self.allowed_node_role_arns:
            raise ValueError(
                "set defaults.nodeRoleArn or allowedNodeRoleArns: with neither, no Job may "
                "name a node role and every gang would be refused"
            )
        if (
            d.node_role_arn
            and self.allowed_node_role_arns
            and d.node_role_arn not in self.allowed_node_role_arns
        ):
            raise ValueError(
                f"defaults.nodeRoleArn {d.node_role_arn} is not in allowedNodeRoleArns; "
                "Jobs relying on the default would be refused"
            )
        if d.keep_warm_ttl > self.limits.max_keep_warm_ttl:
            raise ValueError("defaults.keepWarmTTL is longer than limits.maxKeepWarmTTL")
        ports = [self.metrics_port, self.health_port, self.webhook_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"metricsPort, healthPort and webhookPort must differ, got {ports}")
        return self

    @property
    def allowed_node_roles(self) -> tuple[str, ...]:
        """The node roles a Job may name (the controller's iam:PassRole scope)."""
        return self.allowed_node_role_arns or (self.defaults.node_role_arn,)

    def instance_type_allowed(self, instance_type: str) -> bool:
        """True when the allowlist is empty or an entry matches exactly or as a prefix glob."""
        return not self.allowed_instance_types or any(
            fnmatchcase(instance_type, p) if p.endswith("*") else instance_type == p
            for p in self.allowed_instance_types
        )
