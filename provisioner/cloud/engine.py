"""The EC2 engine: the one object the controller uses to acquire, watch and release gangs.

Called by the GangNodePool reconciler (acquire, describe, release, keep-warm tag, and the
preparation helpers: cluster, AMI, subnets, user data, node identity) and by the reaper
(find_managed, release). Every method returns the project's own types or raises
:class:`~provisioner.cloud.errors.CloudError`, whose kind says what to do next.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial

from provisioner.api import constants as c
from provisioner.api.clock import Clock
from provisioner.cloud import naming
from provisioner.cloud.ami import resolve_ami
from provisioner.cloud.block_offerings import CapacityBlockOffering, list_offerings
from provisioner.cloud.block_purchase import find_bought_block, purchase_block
from provisioner.cloud.cluster import describe_cluster
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.engine_ops import EngineOps
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.fleet import launch_fleet
from provisioner.cloud.images import Ec2ImageOwners, root_device_of
from provisioner.cloud.instancetypes import describe_instance_type
from provisioner.cloud.kept_reads import KeptReads
from provisioner.cloud.leftovers import Leftover, delete_leftovers, find_leftovers
from provisioner.cloud.nodeadm import render_user_data
from provisioner.cloud.ownership import Standing, describe_fleet_tokens, fleet_of, prove
from provisioner.cloud.preflight import verify_access_entry, verify_instance_profile
from provisioner.cloud.release import release
from provisioner.cloud.reservations import decide, describe_reservation
from provisioner.cloud.rollback import roll_back
from provisioner.cloud.runinstances import launch_runinstances
from provisioner.cloud.subnets import plan_subnets
from provisioner.cloud.tags import keep_warm_value
from provisioner.cloud.type_figures import Ec2InstanceTypes
from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceProfileRef,
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
from provisioner.cloud.views import LIVE_STATES, describe_instances, find_managed

log = logging.getLogger(__name__)

TOKEN_MISMATCH = "IdempotentParameterMismatch"
# What a replayed set may show that it can no longer join as.
ENDED_STATES = frozenset({"shutting-down", "terminated"})


def _block_end(reservation: Reservation | None) -> datetime | None:
    if reservation is None or reservation.kind != "capacity-block":
        return None
    return reservation.end


def targeted_spec(spec: LaunchSpec, reservation: Reservation, now: datetime) -> LaunchSpec:
    """``spec`` as launched into ``reservation`` (pure: `atomic-gang doctor`'s launch check
    builds the same request): every launch of the gang targets the reservation, in its zone
    only; raises what ``reservations.decide`` raises for a reservation that cannot take it."""
    subnets = decide(
        reservation,
        instance_type=spec.instance_type,
        count=spec.count,
        subnets=spec.subnets,
        explicit_placement=spec.explicit_placement,
        now=now,
        block_release_margin=spec.block_release_margin,
    )
    return replace(
        spec,
        subnets=subnets,
        capacity_reservation=reservation.ref(),
        # Capacity reserved inside a placement group is reachable only from there.
        placement_group_name=reservation.placement_group_name or spec.placement_group_name,
    )


def shape_mismatch(spec: LaunchSpec, views: Sequence[InstanceView]) -> list[str]:
    """How a proven set differs from the shape ``spec`` asks for (instance type, count,
    subnets and zones as planned); empty when it is that shape."""
    differences: list[str] = []
    types = sorted({v.instance_type for v in views} - {spec.instance_type})
    if types:
        differences.append(f"instance type {', '.join(types)} where {spec.instance_type} is asked")
    if len(views) > spec.count:
        differences.append(f"{len(views)} instances where {spec.count} are asked")
    planned = {s.subnet_id: s.availability_zone for s in spec.subnets}
    elsewhere = sorted(
        f"{v.subnet_id} ({v.availability_zone})"
        for v in views
        if v.subnet_id not in planned or planned[v.subnet_id] != v.availability_zone
    )
    if elsewhere:
        differences.append(
            f"subnets {', '.join(dict.fromkeys(elsewhere))} outside the planned "
            f"{', '.join(planned)}"
        )
    return differences


class Ec2Engine(EngineOps):
    """`EngineOps` against AWS: the calls the controllers make, each one of ours or a
    `CloudError`."""

    def __init__(
        self,
        clients: CloudClients,
        clock: Clock,
        ownership_key: naming.OwnershipKey | None = None,
    ) -> None:
        self._clients = clients
        self._ec2 = clients.ec2
        self._clock = clock
        # Signs every launch token (``naming``): the reaper's proof that an orphan is ours.
        self._ownership_key = ownership_key
        self._images = Ec2ImageOwners(clients.ec2)
        self._instance_types = Ec2InstanceTypes(clients.ec2)
        # The preparation reads every launch and prepare pass makes (`kept_reads`).
        self._kept = KeptReads()

    # --- the gang --------------------------------------------------------------------
    def acquire(self, spec: LaunchSpec) -> LaunchResult:
        """Exactly ``spec.count`` instances, or a CloudError and nothing left running.

        First, a set already launched for this generation (tags are written atomically at
        launch) is adopted: that is the crash-retry path, and it also covers a zone earlier
        in the sweep that has gained capacity since the first pass. A partial set of this
        generation is terminated and reported as MALFORMED.

        With a capacity reservation, EC2's record of it is read first and decides the launch
        (``reservations.decide``): its kind and zone shape the request, and a reservation
        that cannot take N now is reported without asking for a single instance.
        """
        if spec.ownership_key is None:
            spec = replace(spec, ownership_key=self._ownership_key)
        reservation = self._reservation_of(spec)
        existing = self._launched_for(spec)
        misshaped = shape_mismatch(spec, existing)
        if misshaped:
            raise roll_back(
                self._ec2,
                [v.instance_id for v in existing],
                kind=ErrorKind.MALFORMED,
                code=None,
                reason="AdoptionShapeMismatch",
                message=f"The instances launched for pool {spec.pool_name} group "
                f"{spec.group} are not the shape asked for: {'; '.join(misshaped)}. They "
                "are released and the next attempt is a new generation.",
            )
        if len(existing) == spec.count:
            return self._adopt(spec, existing, reservation)
        if existing:
            raise roll_back(
                self._ec2,
                [v.instance_id for v in existing],
                kind=ErrorKind.MALFORMED,
                code=None,
                reason="PartialGroupFound",
                message=f"{len(existing)} live instances of pool {spec.pool_name} group "
                f"{spec.group} exist where {spec.count} or none were expected.",
            )
        info = self._efa_info(spec) if spec.efa else None
        if reservation is not None:
            spec = targeted_spec(spec, reservation, self._clock.now())
        try:
            if spec.mode == c.MODE_FLEET:
                result = launch_fleet(self._ec2, spec)
            else:
                result = launch_runinstances(self._ec2, spec, info)
        except CloudError as err:
            if err.code == TOKEN_MISMATCH:
                raise self._token_reused(spec, err) from err
            raise
        self._refuse_ended_replay(spec, result)
        return replace(result, capacity_block_ends_at=_block_end(reservation))

    def launch_tokens(self, spec: LaunchSpec) -> tuple[str, ...]:
        if spec.ownership_key is None:
            spec = replace(spec, ownership_key=self._ownership_key)
        # The reservation as the caller read it this pass (the controller always does).
        reservation = self._reservation_of(spec)
        if reservation is not None:
            # `acquire` launches only in the reservation's zone; one that cannot take the
            # gang sends nothing, so the untargeted tokens are as good as any.
            with contextlib.suppress(CloudError):
                spec = targeted_spec(spec, reservation, self._clock.now())
        return spec.request_tokens()

    def _token_reused(self, spec: LaunchSpec, err: CloudError) -> CloudError:
        """EC2 answered ``IdempotentParameterMismatch``: this generation's token was used
        with other parameters (a lost answer, then a new AMI or template version). Replaying
        it can never succeed, so the generation moves, but only once no instance of the
        earlier launch is alive: those carry this generation's group tag (written at
        launch), and while one lives the next pass adopts the set or rolls the part back.
        """
        alive = self._launched_for(spec)
        if alive:
            return CloudError(
                ErrorKind.RETRYABLE,
                err.code,
                "EarlierLaunchAlive",
                f"{err.message} {len(alive)} instances of that launch are still alive; the "
                "next pass adopts them or terminates the partial set before moving on.",
            )
        return CloudError(
            ErrorKind.MALFORMED,
            err.code,
            err.reason,
            f"{err.message} No instance of the earlier launch is alive; the next attempt "
            "is a new generation.",
        )

    def _launched_for(self, spec: LaunchSpec) -> list[InstanceView]:
        """The live instances EC2's record proves were launched for this pool object's
        generation (``ownership.prove``: its launch token, from the pool's UID). Others
        tagged as this pool and group (a recreated pool's predecessor, a hand-tagged
        instance) are neither adopted nor rolled back: they are not this launch's."""
        tagged = find_managed(self._ec2, spec.cluster_name, spec.pool_name, spec.group)
        fleets = self.fleet_tokens(f for v in tagged if (f := fleet_of(v)) is not None)
        mine: list[InstanceView] = []
        for view in tagged:
            proof = prove(
                view,
                cluster=spec.cluster_name,
                pool_uid=spec.pool_uid,
                key=spec.ownership_key,
                fleet_tokens=fleets,
            )
            if proof.standing is Standing.CURRENT and proof.generation == spec.acquire_generation:
                mine.append(view)
        strangers = [v.instance_id for v in tagged if v not in mine]
        if strangers:
            log.warning(
                "pool %s group %s: %d instances carry its tags but were not launched for it "
                "(not adopted, not touched): %s",
                spec.pool_name,
                spec.group,
                len(strangers),
                strangers,
            )
        return mine

    def fleet_tokens(self, fleet_ids: Iterable[str]) -> dict[str, str | None]:
        """The ClientToken of each EC2 Fleet, as DescribeFleets answers (None: unknown)."""
        return describe_fleet_tokens(self._ec2, fleet_ids)

    def _refuse_ended_replay(self, spec: LaunchSpec, result: LaunchResult) -> None:
        """A ClientToken replay returns the original instances whatever their state now
        ("Ensuring idempotency in Amazon EC2 API requests"). A set that has since begun to
        terminate can never join: end the generation at once (terminating what still
        lives) instead of waiting out the join deadline. Ids the listing does not show
        yet (eventual consistency after a fresh launch) count as alive.
        """
        views = describe_instances(self._ec2, result.instance_ids)
        ended = [v.instance_id for v in views if v.state in ENDED_STATES]
        if not ended:
            return
        alive = [i for i in result.instance_ids if i not in set(ended)]
        raise roll_back(
            self._ec2,
            alive,
            kind=ErrorKind.MALFORMED,
            code=None,
            reason="ReplayedEndedSet",
            message=f"EC2 answered launch token {result.client_token} of group {spec.group} "
            f"with its earlier set, of which {', '.join(ended)} are shutting down or "
            "terminated; the next attempt is a new generation.",
        )

    def reservation(self, reservation_id: str) -> Reservation:
        """The reservation as EC2 reports it now (its kind shapes the launch template)."""
        return describe_reservation(self._ec2, reservation_id)

    def purchase_capacity_block(self, offering_id: str, tags: Mapping[str, str]) -> str:
        if self._clients.ec2_once is None:
            raise CloudError(
                ErrorKind.CONFIG,
                None,
                "NoSingleAttemptClient",
                "these clients have no single-attempt EC2 client, and PurchaseCapacityBlock "
                "is never sent on a retrying one (it takes no ClientToken)",
            )
        return purchase_block(self._clients.ec2_once, offering_id, tags)

    def bought_block(self, cluster: str, intent: str) -> str | None:
        return find_bought_block(self._ec2, cluster, intent)

    def capacity_block_offerings(
        self,
        instance_type: str,
        count: int,
        duration_hours: int,
        *,
        earliest_start: datetime | None = None,
        latest_end: datetime | None = None,
    ) -> list[CapacityBlockOffering]:
        return list_offerings(
            self._ec2,
            instance_type=instance_type,
            count=count,
            duration_hours=duration_hours,
            earliest_start=earliest_start,
            latest_end=latest_end,
        )

    def _reservation_of(self, spec: LaunchSpec) -> Reservation | None:
        cr = spec.capacity_reservation
        if cr is None:
            return None
        if spec.reservation is not None and spec.reservation.reservation_id == cr.reservation_id:
            return spec.reservation
        return describe_reservation(self._ec2, cr.reservation_id)

    def _efa_info(self, spec: LaunchSpec) -> InstanceTypeInfo:
        info = spec.instance_type_info
        if info is None or info.instance_type != spec.instance_type:
            info = self.instance_type(spec.instance_type)
        if not info.efa_supported:
            raise CloudError(
                ErrorKind.CONFIG,
                None,
                "EfaNotSupported",
                f"{spec.instance_type} does not support EFA; choose an EFA-capable type or "
                "launch without EFA.",
            )
        return info

    def _adopt(
        self, spec: LaunchSpec, views: Sequence[InstanceView], reservation: Reservation | None
    ) -> LaunchResult:
        subnets = tuple(
            dict.fromkeys(
                SubnetRef(v.subnet_id, v.availability_zone)
                for v in views
                if v.subnet_id and v.availability_zone
            )
        )
        tokens = {v.client_token for v in views}
        return LaunchResult(
            instance_ids=tuple(v.instance_id for v in views),
            mode=spec.mode,
            group=spec.group,
            client_token=tokens.pop() if len(tokens) == 1 else None,
            subnets=subnets,
            adopted=True,
            capacity_block_ends_at=_block_end(reservation),
        )

    def describe(self, instance_ids: Sequence[str]) -> list[InstanceView]:
        return describe_instances(self._ec2, instance_ids)

    def find_managed(
        self,
        cluster: str,
        pool: str | None = None,
        group: str | None = None,
        states: Sequence[str] = LIVE_STATES,
    ) -> list[InstanceView]:
        return find_managed(self._ec2, cluster, pool, group, states)

    def release(
        self,
        instance_ids: Sequence[str],
        *,
        known_since: datetime | None = None,
        eni_wait_seconds: float = 300.0,
        poll_seconds: float = 5.0,
    ) -> ReleaseReport:
        return release(
            self._ec2,
            self._clock,
            instance_ids,
            known_since=known_since,
            eni_wait_seconds=eni_wait_seconds,
            poll_seconds=poll_seconds,
        )

    def leftovers(self, cluster: str, pool: str | None = None) -> list[Leftover]:
        """Our launch templates and placement groups, by tag (see ``leftovers``)."""
        return find_leftovers(self._ec2, cluster, pool)

    def delete_leftovers(self, items: list[Leftover]) -> list[Leftover]:
        return delete_leftovers(self._ec2, items)

    def set_keep_warm_tag(self, instance_ids: Sequence[str], until: datetime | None) -> None:
        """Mirror ``keepWarmUntil`` onto the instances (``None`` clears it), in one attempt: a
        throttled mirror waits the pool's backoff, not the SDK's sleep in a pool worker."""
        ids = list(dict.fromkeys(instance_ids))
        value = keep_warm_value(until)
        ec2 = self._clients.ec2_once or self._ec2
        for i in range(0, len(ids), 500):
            try:
                ec2.create_tags(
                    Resources=ids[i : i + 500],
                    Tags=[{"Key": c.TAG_KEEP_WARM_UNTIL, "Value": value}],
                )
            except Exception as exc:
                raise to_cloud_error(exc, "CreateTags keep-warm-until") from exc

    # --- preparation ----------------------------------------------------------------
    def cluster(self, name: str) -> ClusterInfo:
        return describe_cluster(self._clients.eks, name)

    def instance_type(self, instance_type: str) -> InstanceTypeInfo:
        read = partial(describe_instance_type, self._ec2, instance_type)
        return self._kept.immutable(("instance-type", instance_type), read)

    @property
    def instance_types(self) -> Ec2InstanceTypes:
        """What one node of a type offers pods, as DescribeInstanceTypes says (kept per
        type, `cloud.type_figures`)."""
        return self._instance_types

    @property
    def images(self) -> Ec2ImageOwners:
        """Who owns an AMI, as DescribeImages says (kept per image, `cloud.images`)."""
        return self._images

    def root_device(self, image_id: str) -> RootDevice:
        """The AMI's root device, for `instances.rootVolume` (`cloud.images`)."""
        return self._kept.immutable(
            ("root-device", image_id), lambda: root_device_of(self._ec2, image_id)
        )

    def resolve_ami(
        self,
        *,
        k8s_version: str,
        instance_type: str,
        variant: str,
        explicit_ami_id: str | None = None,
        instance_type_info: InstanceTypeInfo | None = None,
    ) -> AmiChoice:
        return resolve_ami(
            self._clients.ssm,
            self._ec2,
            k8s_version=k8s_version,
            instance_type=instance_type,
            variant=variant,
            explicit_ami_id=explicit_ami_id,
            instance_type_info=instance_type_info,
        )

    def plan_subnets(
        self,
        *,
        mode: Mode,
        cluster: ClusterInfo,
        explicit_subnet_ids: Sequence[str] = (),
        availability_zones: Sequence[str] = (),
        addresses_needed: int = 0,
    ) -> tuple[SubnetRef, ...]:
        return plan_subnets(
            self._ec2,
            mode=mode,
            cluster_subnet_ids=cluster.subnet_ids,
            explicit_subnet_ids=explicit_subnet_ids,
            availability_zones=availability_zones,
            vpc_id=cluster.vpc_id,
            addresses_needed=addresses_needed,
        )

    @staticmethod
    def render_user_data(cluster: ClusterInfo, pool: str, group: str | None) -> str:
        return render_user_data(
            cluster_name=cluster.name,
            api_server_endpoint=cluster.endpoint,
            certificate_authority=cluster.certificate_authority,
            service_cidr=cluster.service_cidr,
            pool=pool,
            group=group,
        )

    def verify_node_identity(self, *, cluster: str, role_arn: str) -> InstanceProfileRef:
        """The convention-named profile holding ``role_arn``, after checking the role may
        register with ``cluster``; CONFIG naming the missing piece otherwise."""
        profile = naming.instance_profile_name(cluster, naming.role_name_from_arn(role_arn))
        ref = verify_instance_profile(self._clients.iam, profile, role_arn)
        verify_access_entry(self._clients.eks, cluster, role_arn)
        return ref
