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
    AMI_PATTERN,
    GoDuration,
    Mode,
    NonNegativeDuration,
    PositiveDuration,
    Region,
    RoleArn,
)

__all__ = [
    "AmiPolicy",
    "AwsSettings",
    "Defaults",
    "IamSettings",
    "Instances",
    "LeaderElection",
    "Limits",
    "OwnershipSettings",
    "PulumiSettings",
    "RetryBackoff",
    "RootVolume",
    "SelfManagedCerts",
    "SelfManagedOwnershipKey",
    "Settings",
    "SharedPool",
    "StackOperations",
    "StartupTaint",
    "Tenancy",
    "WebhookSettings",
    "default_stack_workers",
    "memory_limit",
    "snake_keys",
]

_INSTANCE_TYPE_GLOB = re.compile(r"^[a-z0-9.-]+\*?$|^\*$")
_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"
_DEFAULT_STATE_DIR: Final = Path("/var/lib/atomic-gang/pulumi")

Port = Annotated[int, Field(ge=1, le=65535)]


# Settings whose mapping keys are data, not field names: an installer's tag keys
# ("CostCenter") are sent to AWS exactly as written.
_VERBATIM_KEYS: Final = frozenset({"extra_tags"})


def snake_keys(value: Any) -> Any:
    """Rename mapping keys from the chart's camelCase to field names, all the way down."""
    if isinstance(value, Mapping):
        renamed = {}
        for key, inner in value.items():
            name = to_snake(str(key))
            renamed[name] = inner if name in _VERBATIM_KEYS else snake_keys(inner)
        return renamed
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
    # The reaper terminates a gang instance older than its max-lifetime: the backstop for a
    # set nobody releases. Unbounded, a Job could opt out of it ("876000h"). A week covers a
    # multi-day training segment between checkpoints, and bounds what a forgotten gang can
    # cost; a Job asking more is refused at apply, naming this limit, so the installer
    # raises it knowingly for long runs.
    max_lifetime: PositiveDuration = Field(
        default=timedelta(hours=168),
        description="Longest max-lifetime any Job may request (the reaper's backstop).",
    )


# --- amiPolicy: which AMIs a Job may name (atomic-gang.k8s.aws/ami-id) -------------------
# The owner aliases DescribeImages' Owners accepts besides account ids ("DescribeImages",
# EC2 API Reference): "self" is the caller's own account.
AMI_OWNER_ALIASES: Final = ("self", "amazon", "aws-marketplace", "aws-backup-vault")
_ACCOUNT_ID = re.compile(r"^[0-9]{12}$")
_IMAGE_ID = re.compile(AMI_PATTERN)


class AmiPolicy(_Section):
    """Which AMIs a Job may boot with the node role through its ami-id annotation.

    An image boots as a cluster node with the node role's credentials, so a Job's AMI is
    accepted only when EC2 says one of `allowedOwners` owns it, or its id is listed in
    `allowedImageIds`. The default, Amazon's images (the owner alias EC2 gives the
    EKS-optimized AMIs) and the account's own, excludes community and Marketplace images.
    The AMI the controller picks itself (EKS's SSM parameter) is not a Job's choice and is
    not checked here.
    """

    allowed_owners: tuple[str, ...] = Field(
        default=("amazon", "self"),
        description="AMI owners a Job's ami-id may come from: 12-digit account ids, or the "
        "aliases self, amazon, aws-marketplace, aws-backup-vault; empty allows none.",
    )
    allowed_image_ids: tuple[str, ...] = Field(
        default=(), description="AMI ids a Job may name whoever owns them."
    )

    @field_validator("allowed_owners")
    @classmethod
    def _owners(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [o for o in v if o not in AMI_OWNER_ALIASES and not _ACCOUNT_ID.match(o)]
        if bad:
            raise ValueError(
                f"amiPolicy.allowedOwners entries {bad} are neither 12-digit account ids nor "
                f"one of {', '.join(AMI_OWNER_ALIASES)}"
            )
        return v

    @field_validator("allowed_image_ids")
    @classmethod
    def _image_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [i for i in v if not _IMAGE_ID.match(i)]
        if bad:
            raise ValueError(
                f"amiPolicy.allowedImageIds entries {bad} are not AMI ids such as "
                '"ami-0123456789abcdef0"'
            )
        return v


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


# -- webhook certificates the controller makes and rotates itself (issue #30, certs) -------
class SelfManagedCerts(_Section):
    """The controller keeps the webhook's CA and serving certificate in one Secret, renews
    them at `renewFraction` of their life and sets the configuration's caBundle."""

    secret_name: str = Field(min_length=1, description="Secret holding the CA and the pair.")
    namespace: str = Field(min_length=1, description="The Secret's (the release's) namespace.")
    webhook_configuration: str = Field(
        min_length=1, description="ValidatingWebhookConfiguration whose caBundle is set."
    )
    hosts: tuple[str, ...] = Field(
        min_length=1, description="Names the serving certificate carries (the Service's)."
    )
    ca_validity: PositiveDuration = Field(default=timedelta(days=365))
    cert_validity: PositiveDuration = Field(default=timedelta(days=90))
    renew_fraction: float = Field(
        default=2 / 3, gt=0, lt=1, description="Renew when this share of a life has passed."
    )
    check_interval: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description="How often the Secret and caBundle are checked: the bound on restoring "
        "a caBundle that a GitOps sync or apply reset.",
    )

    @model_validator(mode="after")
    def _renews_in_time(self) -> Self:
        if self.cert_validity >= self.ca_validity:
            raise ValueError(
                "webhook.selfManaged.certValidity must be shorter than caValidity: a serving "
                "certificate cannot outlive the CA that signs it"
            )
        if self.check_interval * 10 > self.cert_validity * (1 - self.renew_fraction):
            raise ValueError(
                "webhook.selfManaged.checkInterval is too long for certValidity and "
                "renewFraction: the certificate could expire between two checks; shorten "
                "checkInterval or lower renewFraction"
            )
        return self


class WebhookSettings(_Section):
    enabled: bool = Field(
        default=True, description="Serve the validating Job webhook (on every replica)."
    )
    cert_dir: Path = Field(
        default=Path("/run/secrets/atomic-gang/webhook"),
        description="Directory holding tls.crt and tls.key (the chart mounts them here).",
    )
    self_managed: SelfManagedCerts | None = Field(
        default=None,
        description="Make and rotate the certificate instead of reading certDir (the chart's "
        "certMode selfSigned); certDir is then where this replica writes what it serves.",
    )


class IamSettings(_Section):
    self_manage_instance_profile: bool = Field(
        default=False, description="Create the node instance profile instead of only verifying it."
    )
    manage_access_entry: bool = Field(
        default=False,
        description="Create the node role's EKS access entry instead of verifying it.",
    )


class SelfManagedOwnershipKey(_Section):
    """The Secret the controller keeps the ownership key in (key `key`, 32 random bytes).
    The chart creates it empty; the controller fills it once and never rewrites it."""

    namespace: str = Field(min_length=1, description="The Secret's (the release's) namespace.")
    secret_name: str = Field(min_length=1, description="Secret holding the ownership key.")


class OwnershipSettings(_Section):
    """How the controller proves an instance is one it launched (`cloud.ownership`)."""

    key_file: Path | None = Field(
        default=None,
        description=(
            "File holding this cluster's ownership key (at least 32 random bytes, e.g. a "
            "Secret mounted into the pod): launch tokens are signed with it, and only an "
            "instance whose token verifies is ever reaped once its pool is gone. Unset: "
            "tokens are unsigned and such orphans are reported, never terminated."
        ),
    )
    self_managed: SelfManagedOwnershipKey | None = Field(
        default=None,
        description=(
            "Keep the key in this Secret instead of keyFile (the chart's default): the "
            "controller generates it on first start and reads it back on every start."
        ),
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> Self:
        if self.key_file is not None and self.self_managed is not None:
            raise ValueError(
                "ownership.keyFile and ownership.selfManaged are mutually exclusive: the "
                "cluster has one ownership key; set keyFile for a key you provide, or "
                "selfManaged for one the controller keeps in a Secret, not both"
            )
        return self


# --- instances: what a company's rules ask of every resource the controller creates -------
# "Tag your Amazon EC2 resources" (Amazon EC2 User Guide), "Tag restrictions": at most 50
# user tags per resource, keys of 1-128 and values of 0-256 Unicode characters, and the
# aws: prefix (in any case) reserved for AWS in keys and values.
EC2_TAGS_PER_RESOURCE: Final = 50
EC2_TAG_KEY_MAX: Final = 128
EC2_TAG_VALUE_MAX: Final = 256
# The controller's own tags on a gang instance (cloud.tags.launch_tags): managed, cluster,
# pool, group, max-lifetime, keep-warm-until and the cluster ownership key.
CONTROLLER_TAGS_PER_INSTANCE: Final = 7
# Keys the controller's ownership and the cluster's identity rest on: an installer's tag
# with one of these prefixes could move a resource into or out of a pool or a cluster.
RESERVED_TAG_PREFIXES: Final = (c.PREFIX, "kubernetes.io/cluster/")
# "Amazon EBS volume types" (Amazon EBS User Guide): st1 and sc1 cannot be boot volumes;
# io1/io2 need a provisioned IOPS figure; throughput is set on gp3 only.
ROOT_VOLUME_TYPES: Final = ("gp3", "gp2", "io1", "io2")
_GIB: Final = re.compile(r"^([0-9]+)(Gi)?$")


class RootVolume(_Section):
    """The gang nodes' root EBS volume, set in the pool's launch template on the AMI's own
    root device (DescribeImages' RootDeviceName). Deleted with its instance."""

    volume_size: int = Field(
        ge=1,
        le=65536,
        description='Root volume size: GiB, written "200Gi" (as Karpenter does) or 200.',
    )
    volume_type: Literal["gp3", "gp2", "io1", "io2"] = Field(
        default="gp3", description="EBS volume type; st1/sc1 cannot boot, so are refused."
    )
    iops: int | None = Field(
        default=None,
        ge=100,
        description="Provisioned IOPS: required for io1/io2, optional for gp3.",
    )
    throughput: int | None = Field(
        default=None, ge=125, description="MiB/s, gp3 only (default 125)."
    )

    @field_validator("volume_size", mode="before")
    @classmethod
    def _gibibytes(cls, v: Any) -> Any:
        if isinstance(v, str):
            match = _GIB.match(v.strip())
            if not match:
                raise ValueError(
                    f'instances.rootVolume.volumeSize {v!r} is not a size in GiB such as "200Gi"'
                )
            return int(match.group(1))
        return v

    @model_validator(mode="after")
    def _type_rules(self) -> Self:
        where = "instances.rootVolume"
        if self.volume_type in ("io1", "io2") and self.iops is None:
            raise ValueError(
                f"{where}.iops is required for volumeType {self.volume_type} (provisioned "
                "IOPS volumes), e.g. iops: 16000"
            )
        if self.volume_type == "gp2" and self.iops is not None:
            raise ValueError(
                f"{where}.iops cannot be set for gp2 (its IOPS follow its size); use gp3"
            )
        if self.throughput is not None and self.volume_type != "gp3":
            raise ValueError(f"{where}.throughput is a gp3 setting; remove it or use gp3")
        return self


class Instances(_Section):
    """What the installer's company rules ask of everything the controller creates.

    `extraTags` go on every resource the controller creates: the launch template, the
    placement group, the instance profile and access entry it manages, and each gang
    instance with its volumes and network interfaces. Organisations that deny untagged
    launches (a service control policy requiring, say, `CostCenter`) are satisfied here.
    `rootVolume` sizes the nodes' root volume; unset, the AMI's own mapping is used.
    """

    extra_tags: dict[str, str] = Field(
        default_factory=dict,
        description="Tags added to every resource the controller creates (the chart's `tags`).",
    )
    root_volume: RootVolume | None = Field(
        default=None,
        description="The nodes' root volume (the chart's `rootVolume`); unset keeps the AMI's.",
    )

    @field_validator("extra_tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        where = "instances.extraTags"
        page = '("Tag your Amazon EC2 resources", Tag restrictions)'
        room = EC2_TAGS_PER_RESOURCE - CONTROLLER_TAGS_PER_INSTANCE
        if len(v) > room:
            raise ValueError(
                f"{where} has {len(v)} tags; EC2 allows {EC2_TAGS_PER_RESOURCE} per resource "
                f"and the controller writes {CONTROLLER_TAGS_PER_INSTANCE} of its own, so at "
                f"most {room} fit {page}"
            )
        for key, value in v.items():
            if not key or len(key) > EC2_TAG_KEY_MAX:
                raise ValueError(
                    f"{where} key {key!r} must be 1-{EC2_TAG_KEY_MAX} characters {page}"
                )
            if len(value) > EC2_TAG_VALUE_MAX:
                raise ValueError(
                    f"{where}[{key!r}] value is {len(value)} characters; EC2 allows at most "
                    f"{EC2_TAG_VALUE_MAX} {page}"
                )
            if key.lower().startswith("aws:") or value.lower().startswith("aws:"):
                raise ValueError(
                    f"{where}[{key!r}]: the aws: prefix is reserved for AWS in tag keys and "
                    f"values and EC2 refuses it {page}; rename the tag"
                )
            if key.startswith(RESERVED_TAG_PREFIXES):
                raise ValueError(
                    f"{where} key {key!r} uses a prefix the controller's own ownership and "
                    f"cluster tags use ({', '.join(RESERVED_TAG_PREFIXES)}): it could move a "
                    "resource into or out of a pool or a cluster; choose another key"
                )
        return v


# --- tenancy: which namespaces may use a pool besides the one that created it -------------
_POOL_GLOB = re.compile(r"^\*$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$|^[a-z0-9][-a-z0-9]*\*$")
_NAMESPACE_OR_ANY = re.compile(r"^\*$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SharedPool(_Section):
    """Pools matching `pool` may also be claimed from `namespaces`, whichever of them (or
    any other) created the pool. Sharing a pool shares its warm nodes, and whatever the
    last Job left on their disks."""

    pool: str = Field(
        max_length=63,
        description='A pool name, or a trailing-* glob such as "shared-*"; "*" for every pool.',
    )
    namespaces: tuple[str, ...] = Field(
        min_length=1,
        description='Namespaces whose Jobs may claim those pools; "*" for every namespace.',
    )

    @field_validator("pool")
    @classmethod
    def _pool_glob(cls, v: str) -> str:
        if not _POOL_GLOB.match(v):
            raise ValueError(
                f"tenancy.sharedPools[].pool {v!r} is not a pool name or a trailing-* glob "
                'such as "shared-*" (lowercase letters, digits and "-"), or "*"'
            )
        return v

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in v if len(n) > 63 or not _NAMESPACE_OR_ANY.match(n)]
        if bad:
            raise ValueError(
                f"tenancy.sharedPools[].namespaces {bad} are not namespace names (lowercase "
                'RFC 1123 labels) or "*"'
            )
        return v

    def matches(self, pool: str) -> bool:
        return fnmatchcase(pool, self.pool) if self.pool.endswith("*") else pool == self.pool


class Tenancy(_Section):
    """A pool belongs to the namespace of the Job that created it; Jobs of other namespaces
    may not claim it, nor its warm nodes, unless an entry here shares it with them."""

    shared_pools: tuple[SharedPool, ...] = Field(
        default=(),
        description="Pools that namespaces besides the owner's may claim; empty shares none.",
    )

    def may_share(self, pool: str, namespace: str) -> bool:
        """True when a Job in `namespace` may claim `pool` though another namespace owns it."""
        return any(
            entry.matches(pool) and ("*" in entry.namespaces or namespace in entry.namespaces)
            for entry in self.shared_pools
        )


class StartupTaint(_Section):
    """A taint some agent puts on a node at registration and removes once it has set the
    node up (Karpenter's `startupTaints`): a gang node still carrying one is not usable.
    It matches a Node's taint of the same key and effect, and of the same value when one
    is given here."""

    key: str = Field(min_length=1, max_length=316, description="The taint's key.")
    value: str | None = Field(default=None, description="The taint's value; unset matches any.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="The taint's effect."
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
    join_deadline_seconds: int = Field(
        default=600,
        ge=1,
        description="How long a launched set has for every node to join, turn Ready and "
        "become usable (startup taints gone, allocatable holding one pod's requests); then "
        "the set is released.",
    )
    startup_taints: tuple[StartupTaint, ...] = Field(
        default=(),
        description="Taints that agents remove from a node once it is set up (as Karpenter's "
        "startupTaints); a gang node is not counted while one remains. Empty: none.",
    )
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
    ownership: OwnershipSettings = OwnershipSettings()
    tenancy: Tenancy = Tenancy()
    ami_policy: AmiPolicy = AmiPolicy()
    instances: Instances = Instances()

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
        if d.max_lifetime > self.limits.max_lifetime:
            raise ValueError(
                "defaults.maxLifetime is longer than limits.maxLifetime; Jobs relying on the "
                "default would be refused"
            )
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
