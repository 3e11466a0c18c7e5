"""What a pool pass reads of the world before it plans: the facts a launch and the stack's
launch template both need, gathered once per pass.

The cluster (DescribeCluster), the AMI (the EKS-optimized SSM parameter, unless the Job named
one), the instance type (DescribeInstanceTypes, for EFA) and the reservation
(DescribeCapacityReservations) feed both the check "is the stack prepared from today's
inputs?" that `plan` needs, and the launch itself. The GangNodePool reconciler gathers them
in its observe step, only for a pass that may prepare or launch, with the subnet plan
(DescribeSubnets), and hands the same facts to the plan's inputs (the ClientTokens the
launch marker records, `launch_tokens`) and to the action (which launches into those
subnets, so it sends those tokens).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from provisioner.api import constants as c
from provisioner.api.ami_policy import REASON_AMI_NOT_ALLOWED, REASON_AMI_UNVERIFIED, ami_problem
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import CapacityBlock, GangNodePool
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.instancetypes import efa_cards, uses_efa_only
from provisioner.cloud.naming import group_name
from provisioner.cloud.types import (
    AmiChoice,
    CapacityReservationRef,
    ClusterInfo,
    InstanceProfileRef,
    InstanceTypeInfo,
    LaunchSpec,
    LaunchTemplateRef,
    Reservation,
    RootDevice,
    SubnetRef,
)
from provisioner.controllers.pool.purchase import PurchaseRead, launch_shape
from provisioner.controllers.ports import EngineOps
from provisioner.pulumi_driver.port import (
    PoolLookups,
    PoolOutputs,
    PoolSpec,
    StackError,
    pool_spec_for,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchFacts:
    """EC2's and EKS's answers a launch and the pool's launch template are built from."""

    cluster: ClusterInfo
    ami: AmiChoice
    # DescribeInstanceTypes' answer, read when the gang asks for EFA.
    instance_type: InstanceTypeInfo | None
    # EC2's record of the reservation the gang targets, if it names one.
    reservation: Reservation | None
    # The AMI's root device, read only when the installer sets `instances.rootVolume`.
    root_device: RootDevice | None = None
    # The subnets a launch sweeps, in order (`EngineOps.plan_subnets`); read by a pool's
    # pass, whose launch marker records the tokens they give and whose launch uses them.
    subnets: tuple[SubnetRef, ...] = ()


def gather_launch_facts(
    engine: EngineOps, settings: Settings, shape: GangShape, *, with_subnets: bool = False
) -> LaunchFacts:
    """One read of each (and the subnet plan, `with_subnets`); raises the first
    `CloudError` met (its kind says what it means)."""
    if shape.ami_id:
        _vet_job_ami(engine, settings, shape.ami_id)
    cluster = engine.cluster(settings.cluster_name)
    # Read once for both EFA and the AMI's architecture (a Job's own AMI needs no lookup).
    info = engine.instance_type(shape.instance_type) if shape.efa else None
    ami = engine.resolve_ami(
        k8s_version=cluster.version,
        instance_type=shape.instance_type,
        variant=shape.ami_variant,
        explicit_ami_id=shape.ami_id,
        instance_type_info=info,
    )
    reservation = (
        engine.reservation(shape.capacity_reservation_id) if shape.capacity_reservation_id else None
    )
    root = _root_device(engine, settings, ami.ami_id)
    subnets = (
        engine.plan_subnets(
            mode=shape.mode,
            cluster=cluster,
            explicit_subnet_ids=shape.subnets,
            availability_zones=shape.availability_zones,
            addresses_needed=addresses_needed(shape, info),
        )
        if with_subnets
        else ()
    )
    return LaunchFacts(
        cluster=cluster,
        ami=ami,
        instance_type=info,
        reservation=reservation,
        root_device=root,
        subnets=subnets,
    )


def _root_device(engine: EngineOps, settings: Settings, image_id: str) -> RootDevice | None:
    """The AMI's root device when the installer sizes the root volume; a configuration
    error, before anything is prepared, when the volume is smaller than the AMI's snapshot
    (EC2 would refuse every launch with InvalidBlockDeviceMapping)."""
    volume = settings.instances.root_volume
    if volume is None:
        return None
    root = engine.root_device(image_id)
    if root.snapshot_size_gib is not None and volume.volume_size < root.snapshot_size_gib:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "RootVolumeTooSmall",
            f"instances.rootVolume.volumeSize is {volume.volume_size}Gi, smaller than the "
            f"{root.snapshot_size_gib}Gi snapshot of {image_id}'s root device "
            f"{root.device_name}; set it to at least {root.snapshot_size_gib}Gi (the chart's "
            "rootVolume.volumeSize).",
        )
    return root


def _vet_job_ami(engine: EngineOps, settings: Settings, ami_id: str) -> None:
    """The Job's own AMI again, before anything is prepared or launched: the webhook that
    refuses it at apply may be off or fail open. The same sentence as the webhook's."""
    refusal = ami_problem(ami_id, settings.ami_policy, engine.images)
    if refusal is None:
        return
    unverified = refusal.reason == REASON_AMI_UNVERIFIED
    raise CloudError(
        ErrorKind.RETRYABLE if unverified else ErrorKind.CONFIG,
        None,
        REASON_AMI_UNVERIFIED if unverified else REASON_AMI_NOT_ALLOWED,
        refusal.message,
    )


def addresses_needed(shape: GangShape, info: InstanceTypeInfo | None) -> int:
    """Private addresses the gang takes from its subnet: one per interface that has one on
    every node (an EFA-only interface has none, so an ENA primary with EFA-only cards takes
    one). A subnet with fewer free ranks behind its zone's others (``cloud.subnets`` states
    the rule)."""
    if not shape.efa or info is None or uses_efa_only(info):
        return shape.count
    return shape.count * max(len(efa_cards(info)), 1)


def capacity_block_of(launch: LaunchFacts | CloudError | None) -> CapacityBlock | None:
    """The Capacity Block the gang targets and its end, from this pass's read of EC2."""
    if not isinstance(launch, LaunchFacts):
        return None
    r = launch.reservation
    if r is None or r.kind != "capacity-block" or r.end is None:
        return None
    return CapacityBlock(reservation_id=r.reservation_id, ends_at=r.end)


def _efa_cards(shape: GangShape, info: InstanceTypeInfo | None) -> tuple[int, ...]:
    """One EFA interface per network card, from EC2's DescribeInstanceTypes answer; a
    configuration error for a type without EFA (the launch itself is refused by the engine)."""
    if info is None:
        return ()
    cards = efa_cards(info)
    if not cards:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "EfaNotSupported",
            f"{shape.instance_type} does not support EFA (DescribeInstanceTypes says "
            f"EfaSupported=false); remove {c.ANN_EFA} or choose an EFA-capable type such "
            "as p5.48xlarge, p4d.24xlarge or trn1.32xlarge.",
        )
    return cards


def desired_spec(
    settings: Settings, pool_name: str, shape: GangShape, facts: LaunchFacts
) -> PoolSpec:
    """The pool's stack inputs as the world gives them now (AMI, cluster, reservation)."""
    return pool_spec_for(
        settings,
        shape,
        PoolLookups(
            image_id=facts.ami.ami_id,
            user_data=Ec2Engine.render_user_data(facts.cluster, pool_name, None),
            security_group_ids=facts.cluster.security_group_ids,
            efa_network_cards=_efa_cards(shape, facts.instance_type),
            efa_only=facts.instance_type is not None and uses_efa_only(facts.instance_type),
            placement_group=shape.placement_group == c.PLACEMENT_CLUSTER,
            # The template targets the reservation as EC2 describes it (fleet mode reads the
            # target and a Capacity Block's market type only from the template).
            capacity_reservation_kind=facts.reservation.kind if facts.reservation else "",
            root_device_name=facts.root_device.device_name if facts.root_device else "",
        ),
    )


@dataclass(frozen=True)
class LaunchTarget:
    """The gang a launch is for: its pool, the acquire generation and that generation's
    group (the launch's ClientToken and tags are derived from them)."""

    pool_name: str
    pool_uid: str
    generation: int
    group: str


@dataclass(frozen=True)
class StackNames:
    """What the pool's stack made that a launch names; None where it made none."""

    template_id: str | None = None
    instance_profile_name: str | None = None
    placement_group_name: str | None = None

    @classmethod
    def of(cls, outputs: PoolOutputs | None) -> StackNames:
        """The names in the stack's outputs (none before the stack is prepared)."""
        if outputs is None:
            return cls()
        return cls(
            template_id=outputs.launch_template_id,
            instance_profile_name=outputs.spec.instance_profile_name,
            placement_group_name=outputs.placement_group_name,
        )


def launch_spec(
    settings: Settings,
    *,
    target: LaunchTarget,
    shape: GangShape,
    facts: LaunchFacts,
    subnets: tuple[SubnetRef, ...],
    stack: StackNames,
) -> LaunchSpec:
    """The launch the engine makes for ``shape``'s gang (pure: `atomic-gang doctor`'s
    launch check dry-runs the same one). The stack's outputs name the template, the
    instance profile and the placement group."""
    cluster = facts.cluster
    return LaunchSpec(
        pool_name=target.pool_name,
        pool_uid=target.pool_uid,
        acquire_generation=target.generation,
        cluster_name=settings.cluster_name,
        count=shape.count,
        instance_type=shape.instance_type,
        mode=shape.mode,
        subnets=subnets,
        ami_id=facts.ami.ami_id,
        instance_profile=(
            InstanceProfileRef(name=stack.instance_profile_name)
            if stack.instance_profile_name
            else None
        ),
        security_group_ids=cluster.security_group_ids,
        user_data=Ec2Engine.render_user_data(cluster, target.pool_name, target.group),
        max_lifetime=shape.max_lifetime,
        extra_tags=settings.instances.extra_tags,
        # The engine launches by EC2's record of the reservation (kind, zone), read
        # this pass.
        capacity_reservation=(
            CapacityReservationRef(shape.capacity_reservation_id)
            if shape.capacity_reservation_id
            else None
        ),
        efa=shape.efa,
        placement_group_name=stack.placement_group_name,
        launch_template=LaunchTemplateRef(stack.template_id) if stack.template_id else None,
        explicit_placement=shape.availability_zones or shape.subnets,
        block_release_margin=settings.capacity_block_release,
        reservation=facts.reservation,
        instance_type_info=facts.instance_type,
    )


def pool_launch_spec(
    settings: Settings, pool: GangNodePool, facts: LaunchFacts, stack: StackNames, generation: int
) -> LaunchSpec:
    """The launch of the pool's ``generation``, into the subnets this pass planned: the one
    its action makes and the one its marker's tokens are derived from."""
    return launch_spec(
        settings,
        target=LaunchTarget(
            pool_name=pool.name,
            pool_uid=pool.metadata.uid or pool.name,
            generation=generation,
            group=group_name(generation),
        ),
        shape=launch_shape(pool),
        facts=facts,
        subnets=facts.subnets,
        stack=stack,
    )


def launch_tokens(
    engine: EngineOps, settings: Settings, pool: GangNodePool, launch: LaunchFacts | CloudError
) -> tuple[str, ...]:
    """The ClientTokens this pass's launch would send EC2, in order (the engine signs
    them: only it holds the cluster's key); none when the launch facts could not be read
    (the launch then sends nothing: it reports that failure). The tokens do not depend on
    the stack's names."""
    if isinstance(launch, CloudError) or not launch.subnets:
        return ()
    try:
        spec = pool_launch_spec(
            settings, pool, launch, StackNames(), pool.status.acquire_generation
        )
        return engine.launch_tokens(spec)
    except CloudError:
        return ()


@dataclass(frozen=True)
class StackAnswer:
    """The pool's stack outputs as the pass read them, or the failure reading them met."""

    outputs: PoolOutputs | None
    error: StackError | None = None
    # The backend holds a stack for the pool that has no outputs: a first `up` that failed
    # partway keeps what it made (a placement group, say) and registers none.
    partial: bool = False


@dataclass(frozen=True)
class PassFacts:
    """What one pass read beyond Kubernetes, for its plan and for the action it runs.

    None: not read this pass (the pool's phase's row does not read it; see `phases`)."""

    stack: StackAnswer | None = None
    launch: LaunchFacts | CloudError | None = None
    # What a pass that may buy a Capacity Block read for it (`purchase.read_purchase`).
    purchase: PurchaseRead | None = None


def about_to_launch(pool: GangNodePool) -> bool:
    """A claimed pool in Acquiring with no launch marked: its next step is a prepare or a
    launch, which must start from today's inputs."""
    status = pool.status
    return (
        status.phase == Phase.ACQUIRING
        and status.launch_in_progress is None
        and pool.spec.claim is not None
    )


def stack_holds_what_launch_needs(
    settings: Settings,
    pool: GangNodePool,
    answer: StackAnswer,
    launch: LaunchFacts | CloudError | None,
) -> bool:
    """Whether the stack is prepared — and, when the pool is about to launch, prepared from
    today's inputs: a rotated AMI or a changed template field re-prepares once before the
    launch, instead of launching from the stale template."""
    if answer.error is not None:
        # Unreadable now (the backend down): assume it holds something, so a release still
        # destroys it and a launch still waits on it; the step that reads it meets the same
        # failure and reports it, with its kind, in the status and events.
        log.warning("pool %s: the stack cannot be read now: %s", pool.name, answer.error)
        return True
    if answer.outputs is None:
        return False
    if not about_to_launch(pool):
        return True
    if launch is None or isinstance(launch, CloudError):
        return True  # the launch meets the same failure and reports it with its kind
    try:
        wanted = desired_spec(settings, pool.name, launch_shape(pool), launch)
    except CloudError:
        return True  # likewise
    if answer.outputs.spec == wanted:
        return True
    log.info(
        "pool %s: the stack's inputs changed (%s); preparing again before the launch",
        pool.name,
        ", ".join(answer.outputs.spec.differences(wanted)) or "spec",
        extra={"pool": pool.name, "phase": pool.status.phase},
    )
    return False
