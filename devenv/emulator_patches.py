"""The project's EC2 emulator: moto 5.2.5 extended with what an N-or-0 launcher needs.

`install()` applies the extensions to the moto classes of the current process, once, and
returns the one `EmulatorState` that holds what moto has no place for (the capacity model,
fault switches, idempotency records, pending ENI detaches). Two callers:
- `devenv.emulator`, the server process the integration tests and the demo talk
  to over HTTP (it also exposes `EmulatorState`'s switches under `/_emulator/...`);
- unit tests that run moto in-process: `with mock_aws(): install().reset()`.
Both get identical behaviour because both run this code.

Each patch, what moto does without it, and why the project cannot live with that:
P1 `BaseResponse.call_action`: moto answers every call as it comes. The patch serializes
   calls under one lock (the capacity check and the launch must be one step), seeds a
   region on first use, detaches ENIs whose delay has run out, and answers armed fault
   switches before moto sees the call.
P2 EC2 RunInstances: moto launches MinCount, ignores MaxCount, ignores ClientToken and has
   no capacity. The patch replays a seen ClientToken's reservation, refuses with
   InsufficientInstanceCapacity when fewer than MinCount slots are free (launching
   nothing), else launches min(MaxCount, free); it also applies the launch template's
   subnet or AZ, which moto ignores, so the instance lands where capacity was charged.
P3 EC2 CreateFleet, Type=instant: moto launches the whole target on one override, never
   fails and lists one entry per instance. The patch places instances over the overrides
   as capacity allows, honours MinTargetCapacity with SingleAvailabilityZone and
   SingleInstanceType (short of the minimum it launches nothing and answers `Errors`),
   groups InstanceIds per override, tags instances with `aws:ec2:fleet-id`, replays a seen
   ClientToken, and can be told to return fewer instances than asked (the partial switch).
   Other fleet types stay moto's.
P4 `EC2Backend.run_instances`: moto creates launch-time ENIs with DeleteOnTermination
   false, so a terminated instance's primary ENI would look like a leak. The patch makes
   launch-created ENIs default to true, as on AWS; ENIs attached later keep false.
P5 `EC2Backend.terminate_instances`: moto never detaches the ENIs a termination keeps. The
   patch detaches them `eni_detach_delay` seconds of wall time later (at once for 0).
P6 EKS: moto has no access entries and no Pod Identity associations. The patch adds their
   routes to `moto.eks.urls.url_paths` and their handlers to `EKSResponse`.
P7 `TaggedEC2Resource.get_tags`: moto finds one resource's tags by scanning every tag of
   the region through `describe_tags` and a regex per resource, so listing n tagged
   instances costs O(n^2) (25 s for 1,000 instances; the reaper's 10,000 would take hours).
   The patch reads the resource's own entry of the same tag table: same answer, O(tags).
Seeding (no patch): per region, the EKS-optimized AL2023 AMIs (one per Kubernetes version,
architecture and variant, with the matching architecture) and their SSM parameters under
`/aws/service/eks/optimized-ami/...`, plus one default subnet in every AZ.

Limits kept on purpose: fleets count every instance as one unit of capacity (no weights),
launch with the default capacity type only, and like moto ignore network interfaces in
launch templates.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import functools
import hashlib
import json
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from xml.sax.saxutils import escape

from moto.core.base_backend import BackendDict
from moto.core.model_instances import reset_model_data
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.responses import ActionResult, BaseResponse, EmptyResult
from moto.core.utils import get_service_model, utcnow
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import EC2Backend, ec2_backends
from moto.ec2.models.amis import Ami
from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.responses import EC2Response
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import Cluster, eks_backends
from moto.eks.responses import EKSResponse
from moto.ssm.models import Parameter, ssm_backends

DEFAULT_REGION: Final = "us-east-1"
DEFAULT_FREE_SLOTS: Final = 1000
EKS_AMI_K8S_VERSIONS: Final = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
EKS_AMI_ARCHITECTURES: Final = ("x86_64", "arm64")
EKS_AMI_VARIANTS: Final = ("standard", "nvidia", "neuron")
# The account that publishes the EKS-optimized AMIs in most commercial regions.
EKS_AMI_OWNER_ID: Final = "602401143452"
DEFAULT_CLUSTER_VERSION: Final = "1.36"
DEFAULT_SERVICE_CIDR: Final = "172.20.0.0/16"
FLEET_ID_TAG: Final = "aws:ec2:fleet-id"

_LIVE_STATES: Final = frozenset({"pending", "running"})
_SEEDED_SERVICES: Final = frozenset({"ec2", "ssm", "eks"})
_EPOCH_ATTR: Final = "_atomic_gang_emulator_epoch"
_AZ_RE: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+[a-z]$")
_INSTANCE_TYPE_RE: Final = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+$")
_ACTION_RE: Final = re.compile(r"^[A-Z][A-Za-z0-9]+$")
_IGNORED_IN_FINGERPRINT: Final = frozenset({"ClientToken", "DryRun"})

_DEFAULT_FAULT_MESSAGES: Final = {
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient capacity in the Availability Zone you "
        "requested. Our system will be working on provisioning additional capacity."
    ),
    "RequestLimitExceeded": "Request limit exceeded.",
    "ThrottlingException": "Rate exceeded",
    "InternalError": "An internal error has occurred.",
    "Unsupported": (
        "The requested configuration is currently not supported. "
        "Please check the documentation for supported configurations."
    ),
}
# EC2 answers throttling with 503 and its own failures with 500; everything else is the
# caller's fault (400). botocore retries on both codes and statuses.
_DEFAULT_FAULT_STATUS: Final = {
    "InternalError": 500,
    "InternalFailure": 500,
    "ServiceUnavailable": 503,
    "Unavailable": 503,
    "RequestLimitExceeded": 503,
}


class EmulatorInputError(ValueError):
    """A switch was set with a value the emulator cannot use; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass
class Fault:
    """The next `remaining` calls of `action` fail with `code`, `message` and `status`."""

    action: str
    code: str
    message: str
    status: int
    remaining: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "code": self.code,
            "message": self.message,
            "status": self.status,
            "remaining": self.remaining,
        }


@dataclass
class PartialFleet:
    """The next `remaining` instant fleets launch `missing` fewer instances than planned."""

    missing: int
    remaining: int


@dataclass(frozen=True)
class ClusterSpec:
    """An EKS cluster as the control API registers it; empty fields take defaults."""

    name: str
    endpoint: str | None = None
    certificate_authority_data: str | None = None
    service_ipv4_cidr: str = DEFAULT_SERVICE_CIDR
    version: str = DEFAULT_CLUSTER_VERSION
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    role_arn: str | None = None
    region: str = DEFAULT_REGION
    account_id: str = DEFAULT_ACCOUNT_ID


@dataclass(frozen=True)
class RegionSeed:
    """What seeding put (or found) in one account's region."""

    vpc_id: str
    subnets: Mapping[str, str]


@dataclass(frozen=True)
class _Detach:
    due: float
    account_id: str
    region: str
    epoch: str
    eni_id: str
    instance_id: str


@dataclass(frozen=True)
class _Record:
    epoch: str
    fingerprint: str
    result: Any


@dataclass(frozen=True)
class FleetRequest:
    """The parts of an instant CreateFleet request that decide placement."""

    total: int
    min_target: int
    single_az: bool
    single_type: bool
    lifecycle: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FleetRequest:
        target = params.get("TargetCapacitySpecification") or {}
        # Capacity blocks are paid like on-demand and take the on-demand options.
        spot = target.get("DefaultTargetCapacityType") == "spot"
        lifecycle = "spot" if spot else "on-demand"
        options_key = "SpotOptions" if spot else "OnDemandOptions"
        options = params.get(options_key) or {}
        request = cls(
            total=int(target.get("TotalTargetCapacity") or 0),
            min_target=int(options.get("MinTargetCapacity") or 0),
            single_az=bool(options.get("SingleAvailabilityZone")),
            single_type=bool(options.get("SingleInstanceType")),
            lifecycle=lifecycle,
        )
        request._validate(options_key)
        return request

    def _validate(self, options_key: str) -> None:
        if self.total < 1:
            raise EC2ClientError("InvalidParameterValue", "TotalTargetCapacity must be at least 1.")
        if self.min_target > self.total:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"{options_key}.MinTargetCapacity ({self.min_target}) cannot be greater "
                f"than TotalTargetCapacity ({self.total}).",
            )
        # AWS documents MinTargetCapacity as valid only with one of these two set.
        if self.min_target and not (self.single_az or self.single_type):
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"{options_key}.MinTargetCapacity requires SingleAvailabilityZone or "
                "SingleInstanceType to be true.",
            )


@dataclass(frozen=True)
class FleetSlot:
    """One launch template config + override, resolved to where it would launch."""

    index: int
    az: str
    instance_type: str
    priority: float

    @property
    def pool(self) -> tuple[str, str]:
        return (self.az, self.instance_type)


def plan_fleet(
    slots: Sequence[FleetSlot],
    total: int,
    *,
    single_az: bool,
    single_type: bool,
    free: Mapping[tuple[str, str], int],
) -> dict[int, int]:
    """How many instances each slot gets: the first group that fits `total`, else the best.

    With SingleAvailabilityZone / SingleInstanceType the slots are grouped by AZ / type and
    all instances come from one group, as AWS does; within a group they are spread one at a
    time over the slots (in priority order) while their pools have free slots.
    """
    best: dict[int, int] = {}
    for group in _slot_groups(slots, single_az, single_type):
        allocation = _spread(group, total, dict(free))
        if sum(allocation.values()) == total:
            return allocation
        if sum(allocation.values()) > sum(best.values()):
            best = allocation
    return best


def _slot_groups(
    slots: Sequence[FleetSlot], single_az: bool, single_type: bool
) -> list[list[FleetSlot]]:
    ordered = sorted(slots, key=lambda s: (s.priority, s.index))
    groups: dict[tuple[str, str], list[FleetSlot]] = {}
    for slot in ordered:
        key = (slot.az if single_az else "", slot.instance_type if single_type else "")
        groups.setdefault(key, []).append(slot)
    return list(groups.values())


def _spread(
    group: Sequence[FleetSlot], total: int, free: dict[tuple[str, str], int]
) -> dict[int, int]:
    allocation: dict[int, int] = {}
    placed = 0
    progress = True
    while placed < total and progress:
        progress = False
        for slot in group:
            if placed == total or free.get(slot.pool, 0) <= 0:
                continue
            free[slot.pool] -= 1
            allocation[slot.index] = allocation.get(slot.index, 0) + 1
            placed += 1
            progress = True
    return allocation


def eks_ami_parameter_name(k8s_version: str, architecture: str, variant: str) -> str:
    """The SSM parameter EKS publishes for its recommended AL2023 node AMI."""
    return (
        f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/"
        f"{architecture}/{variant}/recommended/image_id"
    )


def eks_ami_id(region: str, k8s_version: str, architecture: str, variant: str) -> str:
    """The seeded AMI's id: derived from its coordinates, so it survives every reset."""
    digest = hashlib.sha256(f"{region}/{k8s_version}/{architecture}/{variant}".encode())
    return f"ami-0{digest.hexdigest()[:16]}"


def eks_ami_matrix() -> list[tuple[str, str, str]]:
    """(version, architecture, variant) of every seeded AMI; Neuron AMIs are x86_64 only."""
    return [
        (version, arch, variant)
        for version in EKS_AMI_K8S_VERSIONS
        for arch in EKS_AMI_ARCHITECTURES
        for variant in EKS_AMI_VARIANTS
        if not (variant == "neuron" and arch != "x86_64")
    ]


def insufficient_capacity_message(instance_type: str, az: str, alternatives: Iterable[str]) -> str:
    """EC2's wording, naming the AZs that could serve the request instead."""
    message = (
        f"We currently do not have sufficient {instance_type} capacity in the Availability "
        f"Zone you requested ({az}). Our system will be working on provisioning additional "
        "capacity."
    )
    others = sorted(alternatives)
    if others:
        message += (
            f" You can currently get {instance_type} capacity by not specifying an "
            f"Availability Zone in your request or choosing {', '.join(others)}."
        )
    return message


class EmulatorState:
    """Everything the emulator knows that moto does not; `reset()` returns it to defaults.

    Methods are safe to call from the control API's threads: they take `lock`, which the
    patched request path holds for the whole of every AWS call.
    """

    def __init__(
        self,
        default_free: int = DEFAULT_FREE_SLOTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = threading.RLock()
        # Wall time by default; unit tests swap in a fake clock to step ENI detaches.
        self.clock = clock
        self._initial_default_free = default_free
        self._clear()

    def _clear(self) -> None:
        self.default_free = self._initial_default_free
        self.eni_detach_delay = 0.0
        self._totals: dict[tuple[str, str], int] = {}
        self._faults: dict[str, list[Fault]] = {}
        self._partial: PartialFleet | None = None
        self._detaches: list[_Detach] = []
        self._records: dict[tuple[str, str, str, str], _Record] = {}
        self._regions: dict[tuple[str, str], RegionSeed] = {}

    # --- lifecycle -----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget all of moto's resources and every switch, then seed the default region."""
        with self.lock:
            BackendDict.reset()
            reset_model_data()
            self._clear()
            self.ensure_seeded(DEFAULT_ACCOUNT_ID, DEFAULT_REGION)

    def reset_switches(self) -> None:
        """Return switches and records to their defaults, leaving moto's resources alone.

        For callers whose moto was just emptied anyway (entering `mock_aws()`): regions are
        seeded again on their first call.
        """
        with self.lock:
            self._clear()

    def ensure_seeded(self, account_id: str, region: str) -> RegionSeed:
        """Seed `region` unless this incarnation of its backends already was."""
        with self.lock:
            ec2 = ec2_backends[account_id][region]
            known = self._regions.get((account_id, region))
            if known is None or _epoch(ec2) is None:
                known = _seed_ec2(ec2)
                self._regions[(account_id, region)] = known
            _seed_ssm(account_id, region)
            return known

    def subnets(self, region: str = DEFAULT_REGION) -> dict[str, str]:
        """The default subnet of every AZ in `region`, by AZ."""
        return dict(self.ensure_seeded(DEFAULT_ACCOUNT_ID, region).subnets)

    # --- capacity --------------------------------------------------------------------------
    def set_capacity(
        self, az: str, instance_type: str, free: int, account_id: str = DEFAULT_ACCOUNT_ID
    ) -> None:
        """From now on `free` more instances of this type fit in this AZ."""
        _check_instance_type(instance_type)
        _check_count("free", free, minimum=0)
        with self.lock:
            backend = _zone_backend(account_id, az)
            self._totals[(az, instance_type)] = free + _occupied(backend, az, instance_type)

    def set_default_free(self, free: int) -> None:
        """Total slots of every pool not set with `set_capacity`."""
        _check_count("default_free", free, minimum=0)
        with self.lock:
            self.default_free = free

    def free_slots(self, backend: Any, az: str, instance_type: str) -> int:
        total = self._totals.get((az, instance_type), self.default_free)
        return max(0, total - _occupied(backend, az, instance_type))

    def capacity_error(
        self, backend: Any, instance_type: str, az: str, needed: int
    ) -> EC2ClientError:
        zones = [zone.name for zone in backend.describe_availability_zones()]
        alternatives = [
            zone
            for zone in zones
            if zone != az and self.free_slots(backend, zone, instance_type) >= needed
        ]
        return EC2ClientError(
            "InsufficientInstanceCapacity",
            insufficient_capacity_message(instance_type, az, alternatives),
        )

    # --- fault switches ------------------------------------------------------------------
    def inject_fault(
        self,
        action: str,
        code: str,
        message: str | None = None,
        count: int = 1,
        status: int | None = None,
    ) -> Fault:
        """Make the next `count` calls of `action` (an API name, e.g. RunInstances) fail.

        Every HTTP attempt counts as a call: a client that retries throttling or 5xx
        answers consumes one fault per attempt.
        """
        if not _ACTION_RE.match(action or ""):
            raise EmulatorInputError(
                "action", f"action {action!r} is not an API name such as RunInstances"
            )
        if not _ACTION_RE.match(code or ""):
            raise EmulatorInputError(
                "code", f"code {code!r} is not an error code such as RequestLimitExceeded"
            )
        _check_count("count", count, minimum=1)
        resolved_status = status if status is not None else _DEFAULT_FAULT_STATUS.get(code, 400)
        if not 400 <= resolved_status <= 599:
            raise EmulatorInputError(
                "status", f"status {resolved_status} is not an HTTP error status"
            )
        fault = Fault(
            action=action,
            code=code,
            message=message or _DEFAULT_FAULT_MESSAGES.get(code, code),
            status=resolved_status,
            remaining=count,
        )
        with self.lock:
            self._faults.setdefault(action, []).append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()
            self._partial = None

    def take_fault(self, action: str) -> Fault | None:
        """Consume one armed failure of `action`, oldest switch first."""
        with self.lock:
            queue = self._faults.get(action)
            if not queue:
                return None
            fault = queue[0]
            fault.remaining -= 1
            if fault.remaining == 0:
                queue.pop(0)
            return fault

    def has_faults(self) -> bool:
        return bool(self._faults)

    def set_partial_fleet(self, missing: int, count: int = 1) -> None:
        """The next `count` instant fleets return `missing` fewer instances (0 disarms)."""
        _check_count("missing", missing, minimum=0)
        _check_count("count", count, minimum=1)
        with self.lock:
            self._partial = PartialFleet(missing, count) if missing else None

    def take_partial_fleet(self) -> int:
        with self.lock:
            partial = self._partial
            if partial is None:
                return 0
            partial.remaining -= 1
            if partial.remaining == 0:
                self._partial = None
            return partial.missing

    # --- ENI detach delay ----------------------------------------------------------------
    def set_eni_detach_delay(self, seconds: float) -> None:
        """ENIs a termination keeps stay attached this long, then become available."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise EmulatorInputError("seconds", f"seconds must be a number >= 0, got {seconds!r}")
        with self.lock:
            self.eni_detach_delay = float(seconds)

    def schedule_detaches(self, backend: Any, instances: Iterable[Any]) -> None:
        """Detach, now or after the delay, the ENIs these terminated instances kept."""
        with self.lock:
            epoch = _epoch(backend) or ""
            due = self.clock() + self.eni_detach_delay
            for instance in instances:
                for eni in list(instance.nics.values()):
                    if eni.id not in backend.enis or eni.delete_on_termination:
                        continue
                    if self.eni_detach_delay <= 0:
                        instance.detach_eni(eni)
                        continue
                    self._detaches.append(
                        _Detach(
                            due, backend.account_id, backend.region_name, epoch, eni.id, instance.id
                        )
                    )

    def settle_detaches(self) -> None:
        """Detach every ENI whose delay has run out."""
        with self.lock:
            now = self.clock()
            due = [d for d in self._detaches if d.due <= now]
            self._detaches = [d for d in self._detaches if d.due > now]
            for detach in due:
                _detach_if_still_attached(detach)

    # --- ClientToken idempotency ---------------------------------------------------------
    def recall(self, backend: Any, action: str, token: str, fingerprint: str) -> Any | None:
        """The result recorded for this token, if the backend is the one it was made in."""
        record = self._records.get(_record_key(backend, action, token))
        if record is None or record.epoch != _epoch(backend):
            return None
        if record.fingerprint != fingerprint:
            raise EC2ClientError(
                "IdempotentParameterMismatch",
                f"The client token {token} was already used with different parameters.",
            )
        return record.result

    def remember(
        self, backend: Any, action: str, token: str, fingerprint: str, result: Any
    ) -> None:
        self._records[_record_key(backend, action, token)] = _Record(
            _epoch(backend) or "", fingerprint, result
        )

    # --- EKS -----------------------------------------------------------------------------
    def register_eks_cluster(self, spec: ClusterSpec) -> dict[str, Any]:
        """Create (or replace) an ACTIVE cluster that DescribeCluster answers for."""
        with self.lock:
            seed = self.ensure_seeded(spec.account_id, spec.region)
            return _register_cluster(spec, seed)

    # --- what the control API shows ------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Capacity, switches, instance counts by state and seeded regions, as JSON data."""
        with self.lock:
            self.settle_detaches()
            return {
                "default_free": self.default_free,
                "capacity": self._capacity_rows(),
                "faults": [f.as_dict() for queue in self._faults.values() for f in queue],
                "partial_fleet": (
                    None
                    if self._partial is None
                    else {"missing": self._partial.missing, "remaining": self._partial.remaining}
                ),
                "eni_detach_delay_seconds": self.eni_detach_delay,
                "pending_eni_detaches": len(self._detaches),
                "instances": self._instance_counts(),
                "idempotency_records": len(self._records),
                "regions": {
                    region: {
                        "account_id": account,
                        "vpc_id": seed.vpc_id,
                        "subnets": dict(seed.subnets),
                    }
                    for (account, region), seed in self._regions.items()
                },
                "eks_clusters": sorted(
                    name
                    for account, region in self._regions
                    for name in eks_backends[account][region].clusters
                ),
            }

    def _capacity_rows(self) -> list[dict[str, Any]]:
        pools = set(self._totals)
        for backend in self._backends():
            pools.update(
                (i.placement.zone, i.instance_type)
                for i in backend.all_instances()
                if i.state in _LIVE_STATES
            )
        rows = []
        for az, instance_type in sorted(pools):
            backend = self._backend_for(az)
            rows.append(
                {
                    "az": az,
                    "instance_type": instance_type,
                    "free": self.free_slots(backend, az, instance_type),
                    "occupied": _occupied(backend, az, instance_type),
                    "configured": (az, instance_type) in self._totals,
                }
            )
        return rows

    def _instance_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for backend in self._backends():
            for instance in backend.all_instances():
                counts[instance.state] = counts.get(instance.state, 0) + 1
        return counts

    def _backends(self) -> list[Any]:
        return [ec2_backends[account][region] for account, region in self._regions]

    def _backend_for(self, az: str) -> Any:
        return ec2_backends[DEFAULT_ACCOUNT_ID][az[:-1]]


EMULATOR: Final = EmulatorState()
_ORIGINALS: dict[str, Any] = {}
_install_lock = threading.Lock()


def install() -> EmulatorState:
    """Apply every patch once to this process's moto and return the emulator state."""
    with _install_lock:
        if not _ORIGINALS:
            _patch(BaseResponse, "call_action", _call_action)
            _patch(EC2Response, "run_instances", _run_instances)
            _patch(EC2Response, "create_fleet", _create_fleet)
            _patch(EC2Backend, "run_instances", _backend_run_instances)
            _patch(EC2Backend, "terminate_instances", _backend_terminate_instances)
            _patch(TaggedEC2Resource, "get_tags", _get_tags)
            _install_eks()
    return EMULATOR


def _patch(cls: type, name: str, replacement: Callable[..., Any]) -> None:
    # None records an addition (a handler moto lacks) rather than a replacement.
    _ORIGINALS[f"{cls.__name__}.{name}"] = getattr(cls, name, None)
    setattr(cls, name, replacement)


def _original(cls: type, name: str) -> Any:
    return _ORIGINALS[f"{cls.__name__}.{name}"]


# --- P7: one resource's tags ----------------------------------------------------------------
def _get_tags(self: Any) -> list[dict[str, str]]:
    resource_id = getattr(self, "id", None)
    if not resource_id:
        return []
    # `.get`: the table is a defaultdict, and a read must not add an empty entry.
    tags = self.ec2_backend.tags.get(resource_id) or {}
    resource_type = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
    return [
        {"resource_id": resource_id, "key": k, "value": v, "resource_type": resource_type}
        for k, v in tags.items()
    ]


# --- P1: every AWS call ------------------------------------------------------------------
def _call_action(self: Any) -> Any:
    with EMULATOR.lock:
        if self.service_name in _SEEDED_SERVICES:
            EMULATOR.ensure_seeded(self.current_account, self.region)
        if self.service_name == "ec2":
            EMULATOR.settle_detaches()
        if EMULATOR.has_faults():
            fault = EMULATOR.take_fault(str(self._get_action() or ""))
            if fault is not None:
                return _fault_response(self, fault)
        return _original(BaseResponse, "call_action")(self)


def _fault_response(response: Any, fault: Fault) -> tuple[int, dict[str, str], str]:
    """The error as the service's protocol spells it, so botocore parses its code."""
    request_id = str(uuid.uuid4())
    protocol = get_service_model(response.boto3_service_name).protocol
    if protocol in ("json", "rest-json"):
        body = json.dumps({"__type": fault.code, "message": fault.message})
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": fault.code}
        return fault.status, headers, body
    error = f"<Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
    if protocol == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Response><Errors><Error>{error}</Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
    else:
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type>{error}</Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    return fault.status, {"Content-Type": "text/xml"}, body


# --- P2: RunInstances --------------------------------------------------------------------
def _run_instances(self: Any) -> ActionResult:
    self.error_on_dryrun()
    backend = self.ec2_backend
    params: dict[str, Any] = self.params
    token = params.get("ClientToken")
    fingerprint = _fingerprint(params)
    if token:
        earlier = EMULATOR.recall(backend, "RunInstances", token, fingerprint)
        if earlier is not None:
            return ActionResult(earlier)
    min_count, max_count = _launch_counts(params)
    az, instance_type = _apply_run_target(backend, params)
    free = EMULATOR.free_slots(backend, az, instance_type)
    if free < min_count:
        raise EMULATOR.capacity_error(backend, instance_type, az, min_count)
    # moto launches MinCount instances; this is where MaxCount and capacity meet.
    params["MinCount"] = min(max_count, free)
    result: ActionResult = _original(EC2Response, "run_instances")(self)
    if token:
        EMULATOR.remember(backend, "RunInstances", token, fingerprint, result.result)
    return result


def _launch_counts(params: Mapping[str, Any]) -> tuple[int, int]:
    min_count = int(params.get("MinCount") or 1)
    max_count = int(params.get("MaxCount") or min_count)
    if min_count < 1 or max_count < min_count:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"MinCount ({min_count}) must be at least 1 and at most MaxCount ({max_count}).",
        )
    return min_count, max_count


def _apply_run_target(backend: Any, params: dict[str, Any]) -> tuple[str, str]:
    """The AZ and type a RunInstances call will use; a template's subnet/AZ is made explicit."""
    template = _template_data(backend, params.get("LaunchTemplate"))
    instance_type = str(params.get("InstanceType") or template.get("InstanceType") or "m1.small")
    az = _request_az(backend, params)
    if az is not None:
        return az, instance_type
    template_subnet = _spec_subnet(template)
    if template_subnet and not params.get("NetworkInterfaces"):
        params["SubnetId"] = template_subnet
    template_az = _request_az(backend, template)
    if template_az and not template_subnet:
        params["Placement"] = {**(params.get("Placement") or {}), "AvailabilityZone": template_az}
    return template_az or f"{backend.region_name}a", instance_type


def _request_az(backend: Any, spec: Mapping[str, Any]) -> str | None:
    az = (spec.get("Placement") or {}).get("AvailabilityZone")
    if az:
        return str(az)
    subnet_id = _spec_subnet(spec)
    if subnet_id:
        return str(backend.get_subnet(subnet_id).availability_zone)
    return None


def _spec_subnet(spec: Mapping[str, Any]) -> str | None:
    if spec.get("SubnetId"):
        return str(spec["SubnetId"])
    interfaces = sorted(
        spec.get("NetworkInterfaces") or [], key=lambda n: int(n.get("DeviceIndex") or 0)
    )
    return next((str(n["SubnetId"]) for n in interfaces if n.get("SubnetId")), None)


def _template_data(backend: Any, launch_template: Mapping[str, Any] | None) -> dict[str, Any]:
    if not launch_template:
        return {}
    data: dict[str, Any] = backend._get_template_from_args(launch_template).data
    return data


# --- P3: CreateFleet, instant ------------------------------------------------------------
def _create_fleet(self: Any) -> ActionResult:
    params: dict[str, Any] = self.params
    if params.get("Type") != "instant":
        result: ActionResult = _original(EC2Response, "create_fleet")(self)
        return result
    self.error_on_dryrun()
    backend = self.ec2_backend
    token = params.get("ClientToken")
    fingerprint = _fingerprint(params)
    if token:
        earlier = EMULATOR.recall(backend, "CreateFleet", token, fingerprint)
        if earlier is not None:
            return ActionResult(copy.deepcopy(earlier))
    request = FleetRequest.from_params(params)
    fleet = _empty_fleet(backend, params, request)
    answer = _fill_fleet(backend, fleet, request)
    if token:
        EMULATOR.remember(backend, "CreateFleet", token, fingerprint, copy.deepcopy(answer))
    return ActionResult(answer)


def _empty_fleet(backend: Any, params: Mapping[str, Any], request: FleetRequest) -> Any:
    """A moto Fleet record (for DescribeFleets, DeleteFleets, termination) that launched nothing."""
    target = dict(params.get("TargetCapacitySpecification") or {})
    zero = {
        **target,
        "TotalTargetCapacity": 0,
        "OnDemandTargetCapacity": 0,
        "SpotTargetCapacity": 0,
    }
    try:
        fleet = backend.create_fleet(
            on_demand_options=params.get("OnDemandOptions") or {},
            spot_options=params.get("SpotOptions") or {},
            target_capacity_specification=zero,
            launch_template_configs=params.get("LaunchTemplateConfigs") or [],
            excess_capacity_termination_policy=params.get("ExcessCapacityTerminationPolicy"),
            replace_unhealthy_instances=params.get("ReplaceUnhealthyInstances"),
            terminate_instances_with_expiration=params.get(
                "TerminateInstancesWithExpiration", True
            ),
            fleet_type="instant",
            valid_from=params.get("ValidFrom"),
            valid_until=params.get("ValidUntil"),
            tag_specifications=params.get("TagSpecifications") or [],
        )
    except KeyError as missing:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"A launch template config has no {missing.args[0]} in its template or overrides.",
        ) from None
    if not fleet.launch_specs:
        raise EC2ClientError(
            "InvalidParameterValue", "LaunchTemplateConfigs names no launch template."
        )
    fleet.target_capacity_specification = target
    fleet.target_capacity = request.total
    return fleet


def _fill_fleet(backend: Any, fleet: Any, request: FleetRequest) -> dict[str, Any]:
    slots = [_fleet_slot(backend, i, spec) for i, spec in enumerate(fleet.launch_specs)]
    free = {slot.pool: EMULATOR.free_slots(backend, *slot.pool) for slot in slots}
    allocation = plan_fleet(
        slots,
        request.total,
        single_az=request.single_az,
        single_type=request.single_type,
        free=free,
    )
    placed = sum(allocation.values())
    if placed == 0 or placed < request.min_target:
        errors = [_fleet_error(fleet, slot, request, placed) for slot in slots]
        return {"FleetId": fleet.id, "Instances": [], "Errors": errors}
    errors = [
        _fleet_error(fleet, slot, request, placed)
        for slot in slots
        if placed < request.total and free[slot.pool] <= _used(allocation, slots, slot.pool)
    ]
    _withhold(allocation, EMULATOR.take_partial_fleet())
    instances = [
        _launch_slot(backend, fleet, slots[index], count, request.lifecycle)
        for index, count in sorted(allocation.items())
        if count > 0
    ]
    return {"FleetId": fleet.id, "Instances": instances, "Errors": errors}


def _fleet_slot(backend: Any, index: int, spec: Any) -> FleetSlot:
    overrides = spec.overrides or {}
    if spec.subnet_id:
        az = str(backend.get_subnet(spec.subnet_id).availability_zone)
    else:
        template = _template_data(backend, spec.launch_template_spec)
        az = str(
            overrides.get("AvailabilityZone")
            or _request_az(backend, template)
            or f"{backend.region_name}a"
        )
    priority = overrides.get("Priority")
    return FleetSlot(
        index=index,
        az=az,
        instance_type=str(spec.instance_type),
        priority=float(priority) if priority is not None else float("inf"),
    )


def _used(allocation: Mapping[int, int], slots: Sequence[FleetSlot], pool: tuple[str, str]) -> int:
    return sum(allocation.get(slot.index, 0) for slot in slots if slot.pool == pool)


def _withhold(allocation: dict[int, int], missing: int) -> None:
    """Take `missing` instances off the plan, last slots first (the partial-fleet switch)."""
    for index in sorted(allocation, reverse=True):
        taken = min(missing, allocation[index])
        allocation[index] -= taken
        missing -= taken


def _launch_slot(
    backend: Any, fleet: Any, slot: FleetSlot, count: int, lifecycle: str
) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    tags = copy.deepcopy(spec.tag_specifications)
    tags.setdefault("instance", {})[FLEET_ID_TAG] = fleet.id
    reservation = backend.run_instances(
        spec.image_id,
        count,
        spec.user_data,
        list(spec.group_set or []),
        instance_type=spec.instance_type,
        is_instance_type_default=False,
        region_name=backend.region_name,
        subnet_id=spec.subnet_id,
        placement=None if spec.subnet_id else slot.az,
        key_name=spec.key_name,
        fleet_id=fleet.id,
        tags=tags,
        launch_template=spec.launch_template_spec,
        instance_market_options="spot" if lifecycle == "spot" else {},
    )
    for instance in reservation.instances:
        fleet.on_demand_instances.append(
            {"id": reservation.id, "instance": instance, "launch_spec": spec}
        )
    fleet.fulfilled_capacity += count
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": lifecycle,
        "InstanceIds": [instance.id for instance in reservation.instances],
        "InstanceType": spec.instance_type,
    }


def _fleet_error(fleet: Any, slot: FleetSlot, request: FleetRequest, placed: int) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    message = insufficient_capacity_message(slot.instance_type, slot.az, [])
    if placed < request.min_target:
        message += (
            f" The fleet could place {placed} of the {request.min_target} instances "
            "MinTargetCapacity requires, so it launched none."
        )
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": request.lifecycle,
        "ErrorCode": "InsufficientInstanceCapacity",
        "ErrorMessage": message,
    }


def _template_and_overrides(spec: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"LaunchTemplateSpecification": dict(spec.launch_template_spec or {})}
    if spec.overrides:
        answer["Overrides"] = dict(spec.overrides)
    return answer


# --- P4 and P5: ENIs at launch and termination -------------------------------------------
def _backend_run_instances(
    self: Any,
    image_id: str,
    count: int,
    user_data: Any,
    security_group_names: list[str],
    **kwargs: Any,
) -> Any:
    reservation = _original(EC2Backend, "run_instances")(
        self, image_id, count, user_data, security_group_names, **kwargs
    )
    specs = {int(n.get("DeviceIndex") or 0): n for n in kwargs.get("nics") or []}
    for instance in reservation.instances:
        for index, eni in instance.nics.items():
            spec = specs.get(index)
            if spec is None or not ({"NetworkInterfaceId", "DeleteOnTermination"} & set(spec)):
                eni.delete_on_termination = True
    return reservation


def _backend_terminate_instances(self: Any, instance_ids: list[str]) -> Any:
    # AWS answers a repeated terminate with terminated -> terminated; moto would tear the
    # instance down again and fail on the ENI it already deleted. Releases are retried, so
    # the repeat must succeed.
    instances = self.get_multi_instances_by_id(instance_ids)
    done = [i for i in instances if i.state == "terminated"]
    todo = [i.id for i in instances if i.state != "terminated"]
    terminated = _original(EC2Backend, "terminate_instances")(self, todo) if todo else []
    newly = [instance for instance, previous in terminated if previous.name != "terminated"]
    EMULATOR.schedule_detaches(self, newly)
    return [*terminated, *((i, copy.copy(i._state)) for i in done)]


def _detach_if_still_attached(detach: _Detach) -> None:
    backend = ec2_backends[detach.account_id][detach.region]
    if _epoch(backend) != detach.epoch:
        return
    eni = backend.enis.get(detach.eni_id)
    if eni is not None and eni.instance is not None and eni.instance.id == detach.instance_id:
        eni.instance.detach_eni(eni)


# --- P6: EKS access entries and Pod Identity associations --------------------------------
@dataclass
class _ClusterExtras:
    access_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    associations: dict[str, dict[str, Any]] = field(default_factory=dict)


# Keyed by moto's Cluster object, so deleting the cluster or resetting moto drops them.
_CLUSTER_EXTRAS: weakref.WeakKeyDictionary[Cluster, _ClusterExtras] = weakref.WeakKeyDictionary()

_EKS_ROUTES: Final = {
    "{0}/clusters/(?P<name>[^/]+)/access-entries$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations/(?P<associationId>[^/]+)$": (
        EKSResponse.dispatch
    ),
}
_ACCESS_ENTRY_TYPES: Final = frozenset(
    {
        "STANDARD",
        "EC2_LINUX",
        "EC2_WINDOWS",
        "FARGATE_LINUX",
        "EC2",
        "HYBRID_LINUX",
        "HYPERPOD_LINUX",
    }
)
_NODE_USERNAME: Final = "system:node:{{EC2PrivateDNSName}}"


def _install_eks() -> None:
    eks_urls.url_paths.update(_EKS_ROUTES)
    handlers: dict[str, Callable[..., Any]] = {
        "create_access_entry": _create_access_entry,
        "describe_access_entry": _describe_access_entry,
        "list_access_entries": _list_access_entries,
        "update_access_entry": _update_access_entry,
        "delete_access_entry": _delete_access_entry,
        "create_pod_identity_association": _create_association,
        "describe_pod_identity_association": _describe_association,
        "list_pod_identity_associations": _list_associations,
        "update_pod_identity_association": _update_association,
        "delete_pod_identity_association": _delete_association,
    }
    for name, handler in handlers.items():
        _patch(EKSResponse, name, handler)


def _extras(response: Any) -> tuple[Cluster, _ClusterExtras]:
    name = response._get_param("name")
    cluster: Cluster = response.eks_backend.describe_cluster(name=name)
    extras = _CLUSTER_EXTRAS.get(cluster)
    if extras is None:
        extras = _CLUSTER_EXTRAS[cluster] = _ClusterExtras()
    return cluster, extras


def _create_access_entry(self: Any) -> ActionResult:
    cluster, extras = _extras(self)
    principal = str(self._get_param("principalArn") or "")
    _check_principal(principal)
    if principal in extras.access_entries:
        raise ResourceInUseException(
            clusterName=cluster.name,
            message="The specified access entry resource is already in use on this cluster.",
        )
    entry_type = str(self._get_param("type") or "STANDARD")
    if entry_type not in _ACCESS_ENTRY_TYPES:
        raise InvalidParameterException(
            clusterName=cluster.name,
            message=f"The type {entry_type} is not a valid access entry type.",
        )
    now = utcnow()
    entry = {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": list(self._get_param("kubernetesGroups") or []),
        "accessEntryArn": _access_entry_arn(self, cluster.name, principal),
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(self._get_param("tags") or {}),
        "username": self._get_param("username") or _default_username(entry_type, principal),
        "type": entry_type,
    }
    extras.access_entries[principal] = entry
    return ActionResult({"accessEntry": entry})


def _describe_access_entry(self: Any) -> ActionResult:
    return ActionResult({"accessEntry": _access_entry(self)})


def _update_access_entry(self: Any) -> ActionResult:
    entry = _access_entry(self)
    groups = self._get_param("kubernetesGroups")
    if groups is not None:
        entry["kubernetesGroups"] = list(groups)
    if self._get_param("username"):
        entry["username"] = self._get_param("username")
    entry["modifiedAt"] = utcnow()
    return ActionResult({"accessEntry": entry})


def _delete_access_entry(self: Any) -> ActionResult:
    entry = _access_entry(self)
    _extras(self)[1].access_entries.pop(entry["principalArn"])
    return EmptyResult()


def _list_access_entries(self: Any) -> ActionResult:
    _, extras = _extras(self)
    page, token = _page(self, list(extras.access_entries))
    return ActionResult({"accessEntries": page, "nextToken": token})


def _access_entry(response: Any) -> dict[str, Any]:
    cluster, extras = _extras(response)
    principal = str(response._get_param("principalArn") or "")
    entry = extras.access_entries.get(principal)
    if entry is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            message=(
                "The specified principalArn could not be found. You can view your available "
                "access entries with 'list-access-entries'."
            ),
        )
    return entry


def _check_principal(principal: str) -> None:
    if not re.match(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/.+$", principal):
        raise InvalidParameterException(
            message=f"The principalArn parameter format is not valid: {principal!r}."
        )


def _default_username(entry_type: str, principal: str) -> str:
    if entry_type in ("EC2_LINUX", "EC2_WINDOWS", "HYBRID_LINUX", "HYPERPOD_LINUX"):
        return _NODE_USERNAME
    if ":role/" in principal:
        account = principal.split(":")[4]
        role_name = principal.rsplit("/", 1)[-1]
        return f"arn:aws:sts::{account}:assumed-role/{role_name}/{{{{SessionName}}}}"
    return principal


def _access_entry_arn(response: Any, cluster_name: str, principal: str) -> str:
    account = principal.split(":")[4]
    kind, _, path = principal.split(":", 5)[5].partition("/")
    name = path.rsplit("/", 1)[-1]
    return (
        f"arn:{response.partition}:eks:{response.region}:{response.current_account}:"
        f"access-entry/{cluster_name}/{kind}/{account}/{name}/{uuid.uuid4()}"
    )


def _create_association(self: Any) -> ActionResult:
    cluster, extras = _extras(self)
    namespace = str(self._get_param("namespace") or "")
    service_account = str(self._get_param("serviceAccount") or "")
    role_arn = str(self._get_param("roleArn") or "")
    if not (namespace and service_account and role_arn):
        raise InvalidParameterException(
            clusterName=cluster.name, message="namespace, serviceAccount and roleArn are required."
        )
    for existing in extras.associations.values():
        if (existing["namespace"], existing["serviceAccount"]) == (namespace, service_account):
            raise ResourceInUseException(
                clusterName=cluster.name,
                message=f"Association already exists: {existing['associationId']}",
            )
    association_id = "a-" + uuid.uuid4().hex[:17]
    now = utcnow()
    association = {
        "clusterName": cluster.name,
        "namespace": namespace,
        "serviceAccount": service_account,
        "roleArn": role_arn,
        "associationArn": (
            f"arn:{self.partition}:eks:{self.region}:{self.current_account}:"
            f"podidentityassociation/{cluster.name}/{association_id}"
        ),
        "associationId": association_id,
        "tags": dict(self._get_param("tags") or {}),
        "createdAt": now,
        "modifiedAt": now,
        "disableSessionTags": bool(self._get_param("disableSessionTags") or False),
    }
    extras.associations[association_id] = association
    return ActionResult({"association": association})


def _describe_association(self: Any) -> ActionResult:
    return ActionResult({"association": _association(self)})


def _update_association(self: Any) -> ActionResult:
    association = _association(self)
    if self._get_param("roleArn"):
        association["roleArn"] = self._get_param("roleArn")
    association["modifiedAt"] = utcnow()
    return ActionResult({"association": association})


def _delete_association(self: Any) -> ActionResult:
    association = _association(self)
    _extras(self)[1].associations.pop(association["associationId"])
    return ActionResult({"association": association})


def _list_associations(self: Any) -> ActionResult:
    _, extras = _extras(self)
    namespace = self._get_param("namespace")
    service_account = self._get_param("serviceAccount")
    summaries = [
        {
            k: a[k]
            for k in (
                "clusterName",
                "namespace",
                "serviceAccount",
                "associationArn",
                "associationId",
            )
        }
        for a in extras.associations.values()
        if (namespace is None or a["namespace"] == namespace)
        and (service_account is None or a["serviceAccount"] == service_account)
    ]
    page, token = _page(self, summaries)
    return ActionResult({"associations": page, "nextToken": token})


def _association(response: Any) -> dict[str, Any]:
    cluster, extras = _extras(response)
    association_id = str(response._get_param("associationId") or "")
    association = extras.associations.get(association_id)
    if association is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            message=f"No Pod Identity association found for id: {association_id}.",
        )
    return association


def _page(response: Any, items: list[Any]) -> tuple[list[Any], str | None]:
    start = int(response._get_param("nextToken") or 0)
    size = int(response._get_param("maxResults") or 100)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)


def _register_cluster(spec: ClusterSpec, seed: RegionSeed) -> dict[str, Any]:
    _check_cluster_spec(spec)
    backend = eks_backends[spec.account_id][spec.region]
    backend.clusters.pop(spec.name, None)
    ec2 = ec2_backends[spec.account_id][spec.region]
    cluster_sg = _cluster_security_group(ec2, spec.name, seed.vpc_id)
    cluster = backend.create_cluster(
        name=spec.name,
        role_arn=spec.role_arn or f"arn:aws:iam::{spec.account_id}:role/eks-cluster-role",
        resources_vpc_config={
            "subnetIds": list(spec.subnet_ids or seed.subnets.values()),
            "securityGroupIds": list(spec.security_group_ids),
            "clusterSecurityGroupId": cluster_sg,
            "vpcId": seed.vpc_id,
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
            "publicAccessCidrs": ["0.0.0.0/0"],
        },
        version=spec.version,
        kubernetes_network_config={"serviceIpv4Cidr": spec.service_ipv4_cidr, "ipFamily": "ipv4"},
    )
    if spec.endpoint:
        cluster.endpoint = spec.endpoint
    cluster.certificate_authority = {"data": spec.certificate_authority_data or _default_ca_data()}
    # Not modelled by moto; the controller reads it to know access entries are honoured.
    vars(cluster)["access_config"] = {"authenticationMode": "API_AND_CONFIG_MAP"}
    return _cluster_view(cluster)


def _check_cluster_spec(spec: ClusterSpec) -> None:
    if not re.match(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$", spec.name or ""):
        raise EmulatorInputError("name", f"name {spec.name!r} is not a valid EKS cluster name")
    if spec.endpoint is not None and not re.match(r"^https?://", spec.endpoint):
        raise EmulatorInputError("endpoint", f"endpoint {spec.endpoint!r} is not an http(s) URL")
    if spec.certificate_authority_data is not None:
        try:
            pem = base64.b64decode(spec.certificate_authority_data, validate=True)
        except ValueError:
            pem = b""
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise EmulatorInputError(
                "certificate_authority_data",
                "certificate_authority_data must be a base64 PEM certificate",
            )
    if not re.match(r"^\d+\.\d+\.\d+\.\d+/\d+$", spec.service_ipv4_cidr):
        raise EmulatorInputError(
            "service_ipv4_cidr", f"{spec.service_ipv4_cidr!r} is not an IPv4 CIDR"
        )
    if not re.match(r"^1\.\d+$", spec.version):
        raise EmulatorInputError(
            "version", f"version {spec.version!r} is not a Kubernetes minor such as 1.36"
        )


def _cluster_security_group(ec2: Any, cluster_name: str, vpc_id: str) -> str:
    name = f"eks-cluster-sg-{cluster_name}"
    for group in ec2.groups.get(vpc_id, {}).values():
        if group.name == name:
            return str(group.id)
    group = ec2.create_security_group(
        name,
        f"EKS created security group applied to ENI of the cluster {cluster_name}",
        vpc_id=vpc_id,
    )
    group.add_tags(
        {f"kubernetes.io/cluster/{cluster_name}": "owned", "aws:eks:cluster-name": cluster_name}
    )
    return str(group.id)


def _cluster_view(cluster: Cluster) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "arn": cluster.arn,
        "endpoint": cluster.endpoint,
        "certificateAuthority": dict(cluster.certificate_authority),
        "version": cluster.version,
        "status": cluster.status,
        "kubernetesNetworkConfig": dict(cluster.kubernetes_network_config),
        "resourcesVpcConfig": dict(cluster.resources_vpc_config),
        "roleArn": cluster.role_arn,
    }


@functools.lru_cache(maxsize=1)
def _default_ca_data() -> str:
    """A throwaway self-signed CA, base64 PEM, for clusters registered without one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()


# --- seeding -----------------------------------------------------------------------------
def _seed_ec2(backend: Any) -> RegionSeed:
    region = backend.region_name
    for version, arch, variant in eks_ami_matrix():
        ami_id = eks_ami_id(region, version, arch, variant)
        if ami_id not in backend.amis:
            backend.amis[ami_id] = _eks_ami(backend, ami_id, version, arch, variant)
    vpc = backend.get_default_vpc() or backend.create_default_vpc()
    subnets = backend.get_default_subnets()
    for zone in backend.describe_availability_zones():
        if zone.name not in subnets:
            subnets[zone.name] = backend.create_default_subnet(zone.name)
    backend.__dict__[_EPOCH_ATTR] = uuid.uuid4().hex
    return RegionSeed(vpc_id=vpc.id, subnets={az: s.id for az, s in sorted(subnets.items())})


def _eks_ami(backend: Any, ami_id: str, version: str, arch: str, variant: str) -> Ami:
    return Ami(
        backend,
        ami_id,
        name=f"amazon-eks-node-al2023-{arch}-{variant}-{version}-v20250101",
        description=f"EKS-optimized node on Amazon Linux 2023 ({variant}, k8s: {version})",
        owner_id=EKS_AMI_OWNER_ID,
        owner_alias="amazon",
        public=True,
        virtualization_type="hvm",
        architecture=arch,
        hypervisor="xen",
        root_device_type="ebs",
        root_device_name="/dev/xvda",
        region_name=f"{backend.region_name}a",
        boot_mode="uefi-preferred",
    )


def _seed_ssm(account_id: str, region: str) -> None:
    # moto refuses PutParameter under /aws/; its own loaders write the dict directly too.
    parameters = ssm_backends[account_id][region]._parameters
    for version, arch, variant in eks_ami_matrix():
        name = eks_ami_parameter_name(version, arch, variant)
        if dict.__contains__(parameters, name):
            continue
        dict.setdefault(parameters, name, []).append(
            Parameter(  # type: ignore[abstract]  # moto's own loaders build it the same way
                account_id=account_id,
                name=name,
                value=eks_ami_id(region, version, arch, variant),
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=utcnow(),
                version=1,
                data_type="text",
            )
        )


# --- small helpers -----------------------------------------------------------------------
def _epoch(backend: Any) -> str | None:
    """Which incarnation of a backend this is: moto's resets empty its __dict__."""
    value = backend.__dict__.get(_EPOCH_ATTR)
    return str(value) if value is not None else None


def _record_key(backend: Any, action: str, token: str) -> tuple[str, str, str, str]:
    return (backend.account_id, backend.region_name, action, token)


def _fingerprint(params: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if k not in _IGNORED_IN_FINGERPRINT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def _occupied(backend: Any, az: str, instance_type: str) -> int:
    return sum(
        1
        for instance in backend.all_instances()
        if instance.state in _LIVE_STATES
        and instance.placement.zone == az
        and instance.instance_type == instance_type
    )


def _zone_backend(account_id: str, az: str) -> Any:
    """The EC2 backend of the region `az` belongs to, refusing names EC2 would not know."""
    if not isinstance(az, str) or not _AZ_RE.match(az) or az[:-1] not in ec2_backends[account_id]:
        raise EmulatorInputError("az", f"az {az!r} is not an availability zone such as us-east-1a")
    backend = ec2_backends[account_id][az[:-1]]
    if az not in {zone.name for zone in backend.describe_availability_zones()}:
        raise EmulatorInputError("az", f"az {az!r} is not one of {az[:-1]}'s availability zones")
    return backend


def _check_instance_type(instance_type: str) -> None:
    if not isinstance(instance_type, str) or not _INSTANCE_TYPE_RE.match(instance_type):
        raise EmulatorInputError(
            "instance_type",
            f"instance_type {instance_type!r} is not an EC2 type such as p5.48xlarge",
        )


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EmulatorInputError(name, f"{name} must be an integer >= {minimum}, got {value!r}")
