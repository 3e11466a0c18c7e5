"""What every part of the emulator shares: defaults, the control API's input errors, cluster
and region records, and the small checks and counts the patches and the state agree on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

DEFAULT_REGION: Final = "us-east-1"
DEFAULT_FREE_SLOTS: Final = 1000
DEFAULT_CLUSTER_VERSION: Final = "1.36"
DEFAULT_SERVICE_CIDR: Final = "172.20.0.0/16"
FLEET_ID_TAG: Final = "aws:ec2:fleet-id"

LIVE_STATES: Final = frozenset({"pending", "running"})
EPOCH_ATTR: Final = "_atomic_gang_emulator_epoch"
_AZ_RE: Final = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+[a-z]$")
_INSTANCE_TYPE_RE: Final = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+$")
_IGNORED_IN_FINGERPRINT: Final = frozenset({"ClientToken", "DryRun"})


class EmulatorInputError(ValueError):
    """A switch was set with a value the emulator cannot use; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


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


def backend_epoch(backend: Any) -> str | None:
    """Which incarnation of a backend this is: moto's resets empty its __dict__."""
    value = backend.__dict__.get(EPOCH_ATTR)
    return str(value) if value is not None else None


def record_key(backend: Any, action: str, token: str) -> tuple[str, str, str, str]:
    return (backend.account_id, backend.region_name, action, token)


def request_fingerprint(params: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if k not in _IGNORED_IN_FINGERPRINT}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def occupied(backend: Any, az: str, instance_type: str) -> int:
    """Live instances on the pool's ordinary capacity: a reservation's instances run on
    capacity set aside for it, so they never take a free slot from everyone else."""
    return sum(
        1
        for instance in backend.all_instances()
        if instance.state in LIVE_STATES
        and instance.placement.zone == az
        and instance.instance_type == instance_type
        and not reservation_of(instance)
    )


def reservation_of(instance: Any) -> str | None:
    """The Capacity Reservation an instance runs in (the emulator sets it at launch)."""
    value = getattr(instance, "capacity_reservation_id", None)
    return str(value) if value else None


def zone_backend(account_id: str, az: str) -> Any:
    """The EC2 backend of the region `az` belongs to, refusing names EC2 would not know."""
    if not isinstance(az, str) or not _AZ_RE.match(az) or az[:-1] not in ec2_backends[account_id]:
        raise EmulatorInputError("az", f"az {az!r} is not an availability zone such as us-east-1a")
    backend = ec2_backends[account_id][az[:-1]]
    if az not in {zone.name for zone in backend.describe_availability_zones()}:
        raise EmulatorInputError("az", f"az {az!r} is not one of {az[:-1]}'s availability zones")
    return backend


def check_instance_type(instance_type: str) -> None:
    if not isinstance(instance_type, str) or not _INSTANCE_TYPE_RE.match(instance_type):
        raise EmulatorInputError(
            "instance_type",
            f"instance_type {instance_type!r} is not an EC2 type such as p5.48xlarge",
        )


def check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EmulatorInputError(name, f"{name} must be an integer >= {minimum}, got {value!r}")
