"""The EC2 engine: the one object the controller uses to acquire, watch and release gangs.

Called by the GangNodePool reconciler (acquire, describe, release, keep-warm tag, and the
preparation helpers: cluster, AMI, subnets, user data, node identity) and by the reaper
(find_managed, release). Every method returns the project's own types or raises
:class:`~provisioner.cloud.errors.CloudError`, whose kind says what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from provisioner.api import constants as c
from provisioner.api.clock import Clock
from provisioner.cloud import naming
from provisioner.cloud.ami import resolve_ami
from provisioner.cloud.cluster import describe_cluster
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.fleet import launch_fleet
from provisioner.cloud.instancetypes import describe_instance_type
from provisioner.cloud.leftovers import Leftover, delete_leftovers, find_leftovers
from provisioner.cloud.nodeadm import render_user_data
from provisioner.cloud.preflight import verify_access_entry, verify_instance_profile
from provisioner.cloud.release import release
from provisioner.cloud.reservations import decide, describe_reservation
from provisioner.cloud.rollback import roll_back
from provisioner.cloud.runinstances import launch_runinstances
from provisioner.cloud.subnets import plan_subnets
from provisioner.cloud.tags import keep_warm_value
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
    SubnetRef,
)
from provisioner.cloud.views import LIVE_STATES, describe_instances, find_managed

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


class Ec2Engine:
    def __init__(self, clients: CloudClients, clock: Clock) -> None:
        self._clients = clients
        self._ec2 = clients.ec2
        self._clock = clock

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
        reservation = self._reservation_of(spec)
        existing = find_managed(self._ec2, spec.cluster_name, spec.pool_name, spec.group)
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

    def _token_reused(self, spec: LaunchSpec, err: CloudError) -> CloudError:
        """EC2 answered ``IdempotentParameterMismatch``: this generation's token was used
        with other parameters (a lost answer, then a new AMI or template version). Replaying
        it can never succeed, so the generation moves, but only once no instance of the
        earlier launch is alive: those carry this generation's group tag (written at
        launch), and while one lives the next pass adopts the set or rolls the part back.
        """
        alive = find_managed(self._ec2, spec.cluster_name, spec.pool_name, spec.group)
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
            info = describe_instance_type(self._ec2, spec.instance_type)
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
        """Mirror ``keepWarmUntil`` onto the instances; ``None`` clears it."""
        ids = list(dict.fromkeys(instance_ids))
        value = keep_warm_value(until)
        for i in range(0, len(ids), 500):
            try:
                self._ec2.create_tags(
                    Resources=ids[i : i + 500],
                    Tags=[{"Key": c.TAG_KEEP_WARM_UNTIL, "Value": value}],
                )
            except Exception as exc:
                raise to_cloud_error(exc, "CreateTags keep-warm-until") from exc

    # --- preparation ----------------------------------------------------------------
    def cluster(self, name: str) -> ClusterInfo:
        return describe_cluster(self._clients.eks, name)

    def instance_type(self, instance_type: str) -> InstanceTypeInfo:
        return describe_instance_type(self._ec2, instance_type)

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
