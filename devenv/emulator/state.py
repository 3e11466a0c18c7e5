"""`EmulatorState`: everything the emulator knows that moto does not, and the one `EMULATOR`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Final

from moto.core.base_backend import BackendDict
from moto.core.model_instances import reset_model_data
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends
from moto.eks.models import eks_backends

from devenv.emulator.consistency import ConsistencySwitches
from devenv.emulator.eks_cluster import register_cluster
from devenv.emulator.faults import FaultSwitches
from devenv.emulator.instance_events import InstanceEventFeed
from devenv.emulator.instance_profiles import VISIBILITY as PROFILE_VISIBILITY
from devenv.emulator.interfaces import detach_interface
from devenv.emulator.model import (
    DEFAULT_FREE_SLOTS,
    DEFAULT_REGION,
    LIVE_STATES,
    ClusterSpec,
    EmulatorInputError,
    RegionSeed,
    backend_epoch,
    check_count,
    check_instance_type,
    insufficient_capacity_message,
    occupied,
    record_key,
    zone_backend,
)
from devenv.emulator.organization import OrganizationPolicies
from devenv.emulator.reserved import ReservedCapacity
from devenv.emulator.seeding import (
    publish_eks_ami,
    seed_ec2,
    seed_ssm,
    set_eks_ami_owner_alias,
    share_public_ami,
)
from devenv.emulator.throttling import ThrottleBuckets


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


class EmulatorState(
    FaultSwitches, ThrottleBuckets, ConsistencySwitches, ReservedCapacity, OrganizationPolicies
):
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
        # Outside `_clear`: its numbering outlives a reset, so a reader can tell it missed some.
        self.instance_events = InstanceEventFeed()
        self._clear()

    def _clear(self) -> None:
        self.default_free = self._initial_default_free
        self.eni_detach_delay = 0.0
        # DryRun as EC2 documents it checks permissions only; on, the launch calls also
        # check their parameters before answering DryRunOperation (`authorization`).
        self.dry_run_validates = False
        self._totals: dict[tuple[str, str], int] = {}
        self._clear_faults_state()
        self._clear_throttling_state()
        self._clear_consistency_state()
        self._clear_reserved_state()
        self._clear_organization_state()
        self._detaches: list[_Detach] = []
        self._records: dict[tuple[str, str, str, str], _Record] = {}
        self._regions: dict[tuple[str, str], RegionSeed] = {}
        self.instance_events.forget()
        PROFILE_VISIBILITY.reset()

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

    def set_instance_profile_lag(self, seconds: float) -> dict[str, float]:
        """EC2 does not know an instance profile until `seconds` after IAM made it (IAM's
        eventual consistency; ``instance_profiles``), until the next reset."""
        with self.lock:
            PROFILE_VISIBILITY.set_lag(seconds)
            return {"seconds": PROFILE_VISIBILITY.lag}

    def set_dry_run_validation(self, on: bool) -> None:
        """Whether a launch call's DryRun also checks its parameters (default: permission
        only, as EC2's DryRun parameter documents)."""
        with self.lock:
            self.dry_run_validates = on

    def ensure_seeded(self, account_id: str, region: str) -> RegionSeed:
        """Seed `region` unless this incarnation of its backends already was."""
        with self.lock:
            ec2 = ec2_backends[account_id][region]
            known = self._regions.get((account_id, region))
            if known is None or backend_epoch(ec2) is None:
                known = seed_ec2(ec2)
                self._regions[(account_id, region)] = known
            seed_ssm(account_id, region)
            return known

    def tick(self, backend: Any | None = None) -> None:
        """What EC2 does on its own as time passes: ENIs detach, Capacity Blocks end (in
        `backend`'s region, or in every seeded one).

        Every EC2 call does this first, for its region; a reader of the instance event feed,
        which makes no EC2 call, does it for all, so an ended block's terminations reach it.
        """
        with self.lock:
            self.settle_detaches()
            for each in [backend] if backend is not None else self._backends():
                self.reclaim_expired_blocks(each)

    def subnets(self, region: str = DEFAULT_REGION) -> dict[str, str]:
        """The default subnet of every AZ in `region`, by AZ."""
        return dict(self.ensure_seeded(DEFAULT_ACCOUNT_ID, region).subnets)

    # --- capacity --------------------------------------------------------------------------
    def set_capacity(
        self, az: str, instance_type: str, free: int, account_id: str = DEFAULT_ACCOUNT_ID
    ) -> None:
        """From now on `free` more instances of this type fit in this AZ."""
        check_instance_type(instance_type)
        check_count("free", free, minimum=0)
        with self.lock:
            backend = zone_backend(account_id, az)
            self._totals[(az, instance_type)] = free + occupied(backend, az, instance_type)

    def set_default_free(self, free: int) -> None:
        """Total slots of every pool not set with `set_capacity`."""
        check_count("default_free", free, minimum=0)
        with self.lock:
            self.default_free = free

    def free_slots(self, backend: Any, az: str, instance_type: str) -> int:
        total = self._totals.get((az, instance_type), self.default_free)
        return max(0, total - occupied(backend, az, instance_type))

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
            epoch = backend_epoch(backend) or ""
            due = self.clock() + self.eni_detach_delay
            for instance in instances:
                for eni in list(instance.nics.values()):
                    if eni.id not in backend.enis or eni.delete_on_termination:
                        continue
                    if self.eni_detach_delay <= 0:
                        detach_interface(instance, eni)
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
        record = self._records.get(record_key(backend, action, token))
        if record is None or record.epoch != backend_epoch(backend):
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
        self._records[record_key(backend, action, token)] = _Record(
            backend_epoch(backend) or "", fingerprint, result
        )

    # --- EKS -----------------------------------------------------------------------------
    def register_eks_cluster(self, spec: ClusterSpec) -> dict[str, Any]:
        """Create (or replace) an ACTIVE cluster that DescribeCluster answers for."""
        with self.lock:
            seed = self.ensure_seeded(spec.account_id, spec.region)
            return register_cluster(spec, seed)

    def publish_eks_ami(
        self, parameter: str, image_id: str, region: str = DEFAULT_REGION
    ) -> dict[str, Any]:
        """AWS rotates the AMI EKS recommends: `parameter` answers `image_id` from now on."""
        with self.lock:
            self.ensure_seeded(DEFAULT_ACCOUNT_ID, region)
            version = publish_eks_ami(DEFAULT_ACCOUNT_ID, region, parameter, image_id)
            return {"parameter": parameter, "image_id": image_id, "version": version}

    def share_public_ami(
        self, owner_id: str, name: str, region: str = DEFAULT_REGION
    ) -> dict[str, Any]:
        """Another account publishes a public AMI: DescribeImages lists it with its owner."""
        with self.lock:
            self.ensure_seeded(DEFAULT_ACCOUNT_ID, region)
            image_id = share_public_ami(DEFAULT_ACCOUNT_ID, region, owner_id, name)
            return {"image_id": image_id, "owner_id": owner_id}

    def set_eks_ami_owner_alias(
        self, alias: str | None, region: str = DEFAULT_REGION
    ) -> dict[str, Any]:
        """The seeded EKS AMIs answer DescribeImages with this ImageOwnerAlias (None: none),
        until the next reset (`seeding.EKS_AMI_OWNER_ALIAS` says why it is a switch)."""
        with self.lock:
            self.ensure_seeded(DEFAULT_ACCOUNT_ID, region)
            changed = set_eks_ami_owner_alias(ec2_backends[DEFAULT_ACCOUNT_ID][region], alias)
            return {"alias": alias, "images": changed}

    # --- what the control API shows ------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Capacity, switches, instance counts by state and seeded regions, as JSON data."""
        with self.lock:
            self.settle_detaches()
            return {
                "default_free": self.default_free,
                "capacity": self._capacity_rows(),
                "faults": [f.as_dict() for queue in self._faults.values() for f in queue],
                "delays": [d.as_dict() for queue in self._delays.values() for d in queue],
                "short_answers": self.short_answers(),
                "listing_lag_seconds": self.listing_lag,
                "consistency_lags": self.lag_views(),
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
                "capacity_reservations": self.capacity_reservation_views(),
                "placement_groups": self.placement_group_views(),
                "clock_offset_seconds": self.clock_offset,
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
                if i.state in LIVE_STATES
            )
        rows = []
        for az, instance_type in sorted(pools):
            backend = self._backend_for(az)
            rows.append(
                {
                    "az": az,
                    "instance_type": instance_type,
                    "free": self.free_slots(backend, az, instance_type),
                    "occupied": occupied(backend, az, instance_type),
                    "configured": (az, instance_type) in self._totals,
                }
            )
        return rows

    def instance_history(self) -> list[dict[str, Any]]:
        """Every instance EC2 ever ran here, in DescribeInstances' shape, including those
        terminated long enough ago to be gone from its answers: EC2's own record of what it
        ran and billed (its usage records outlive the hour a terminated instance is listed)."""
        with self.lock:
            return [_history_entry(i) for b in self._backends() for i in b.all_instances()]

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


def _detach_if_still_attached(detach: _Detach) -> None:
    backend = ec2_backends[detach.account_id][detach.region]
    if backend_epoch(backend) != detach.epoch:
        return
    eni = backend.enis.get(detach.eni_id)
    if eni is not None and eni.instance is not None and eni.instance.id == detach.instance_id:
        detach_interface(eni.instance, eni)


def _history_entry(instance: Any) -> dict[str, Any]:
    return {
        "InstanceId": instance.id,
        "InstanceType": instance.instance_type,
        # moto's times are naive UTC.
        "LaunchTime": instance.launch_time.replace(tzinfo=UTC).isoformat(),
        "State": {"Name": instance.state},
        "StateTransitionReason": instance.state_transition_reason or "",
        "Placement": {"AvailabilityZone": instance.placement.zone},
        "Tags": [{"Key": t["key"], "Value": t["value"]} for t in instance.get_tags()],
    }
