"""The GangNodePool custom resource: typed spec and status, the CRD and its print columns.

A GangNodePool is the controller's own record of one pool (cluster-scoped, named by the
Job's pool label, or derived from its namespace, GangClass and shape: `api.gang_class`). The
Workload reconciler alone writes `spec` (the first claimant's shape plus the one claim, the
class it was read through, who decided each field, and the class's Capacity Block purchase
policy, so the pool buys under it without reading the class); the GangNodePool reconciler
alone writes `status`. `provisioner/kube`
converts API bodies with `GangNodePool.from_dict` / `to_dict`, and installs `load_crd()`.
The CRD's schema is written by hand in `crds/gangnodepool.yaml`; a unit test keeps it in
step with these models.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from importlib import resources
from typing import Annotated, Any, Final, cast

import yaml
from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema, model_validator

from provisioner.api import constants as c
from provisioner.api.class_purchase import ClassBlockPurchase
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.fields import InstanceId, Mode
from provisioner.api.gang_class import ClassedShape, FieldSource
from provisioner.api.meta import Condition, KubeModel, KubeTime, ObjectMeta
from provisioner.api.shape import GangShape

__all__ = [
    "PRINTER_COLUMNS",
    "BlockPurchase",
    "BlockRefusal",
    "CapacityBlock",
    "Claim",
    "GangNodePool",
    "GangNodePoolSpec",
    "GangNodePoolStatus",
    "LastError",
    "LaunchInProgress",
    "Phase",
    "QueuedWorkload",
    "ReleaseInProgress",
    "StackOperation",
    "StackOutcome",
    "StackResult",
    "UnusableNode",
    "load_crd",
]


class Claim(KubeModel):
    """The one Workload a pool serves; its UID tells a recreated Workload from the old one."""

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)
    claimed_at: KubeTime


class QueuedWorkload(KubeModel):
    """A Workload of the pool's shape that waits for Kueue's quota: the pool prepares its
    stack ahead of the claim, so a cold admission waits only for EC2 and the join."""

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)
    queued_at: KubeTime


class GangNodePoolSpec(GangShape):
    """The first claimant's shape, the current claim (None while nobody holds it), the
    namespace the pool belongs to, and what one pod of the claimant's gang requests."""

    claim: Claim | None = None
    # A Workload waiting for quota on a queue with our check, whose shape this pool has
    # (`controllers/workload/prepare_ahead.py`). An unclaimed Idle pool prepares its stack
    # for it while the request is younger than `stackOperations.idleStackTTL`; the claim,
    # when Kueue reserves quota, then launches at once. Never a claim: a Workload holding
    # quota claims the pool whoever queued it.
    queued: QueuedWorkload | None = None
    # Resource name to quantity: resource by resource, the most any one pod of the last
    # claimant's gang requests (`api.pod_requests.gang_pod_requests`). A node is usable only
    # when its allocatable holds all of it (`controllers/pool/usable.py`). None: not known
    # (a pool written before the field), which asks nothing of a node's allocatable.
    pod_requests: dict[str, str] | None = None
    # The namespace of the Job that created the pool; set once (the CRD refuses a change).
    # None only on a pool made before pools belonged to a namespace, until its next claim
    # binds it (`workload_decision`).
    owner_namespace: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    # The GangClass the last claimant's shape was read through (None: its annotations
    # alone), and who decided each field of it, by annotation name (and "pool").
    gang_class: str | None = Field(default=None, min_length=1)
    field_sources: dict[str, FieldSource] | None = None
    # The last claimant's class's blockPurchase, copied here by the Workload reconciler:
    # the policy the pool buys under (None: the settings', as for a gang without a class).
    purchase_policy: ClassBlockPurchase | None = None

    @classmethod
    def of(
        cls,
        shape: GangShape,
        claim: Claim | None,
        owner_namespace: str | None = None,
        pod_requests: dict[str, str] | None = None,
        read: ClassedShape | None = None,
    ) -> GangNodePoolSpec:
        """A new pool's spec: `shape`, held by `claim`, belonging to `owner_namespace`, for
        pods requesting `pod_requests`, decided as `read` says. The shape and claim are
        validated models already, so the spec is put together from their fields rather than
        parsed again."""
        return cls.model_construct(
            **_shape_fields(shape),
            claim=claim,
            owner_namespace=owner_namespace,
            pod_requests=dict(pod_requests) if pod_requests else None,
            **_provenance(read),
        )

    def bound_to(self, namespace: str) -> GangNodePoolSpec:
        """This spec belonging to `namespace` (for a pool that belonged to none)."""
        return self.model_copy(update={"owner_namespace": namespace})

    def shape(self) -> GangShape:
        """The shape alone, for comparing with a later claimant's."""
        return GangShape.model_construct(**_shape_fields(self))

    def with_claim(
        self,
        claim: Claim | None,
        shape: GangShape | None = None,
        pod_requests: dict[str, str] | None = None,
        read: ClassedShape | None = None,
    ) -> GangNodePoolSpec:
        """This spec held by `claim` (None: released), with `shape`'s fields, the new
        claimant's `pod_requests` and how its shape was decided (`read`) when given (a
        release keeps the last claimant's).

        A field the new shape leaves unset (None) keeps this spec's value, as merging the
        shape's body (unset fields left out) into the stored spec always has.
        """
        reshaped = {} if shape is None else _shape_fields(shape, skip_none=True)
        if pod_requests is not None:
            reshaped["pod_requests"] = dict(pod_requests) or None
        if read is not None:
            reshaped.update(_provenance(read))
        if claim is not None and self.queued is not None and self.queued.uid == claim.uid:
            reshaped["queued"] = None  # the Workload it was prepared for now holds it
        return self.model_copy(update={**reshaped, "claim": claim})


def _provenance(read: ClassedShape | None) -> dict[str, Any]:
    if read is None:
        return {}
    return {
        "gang_class": read.gang_class,
        "field_sources": dict(read.sources),
        "purchase_policy": read.purchase_policy,
    }


def _shape_fields(shape: GangShape, *, skip_none: bool = False) -> dict[str, Any]:
    fields = {name: getattr(shape, name) for name in GangShape.model_fields}
    return {k: v for k, v in fields.items() if v is not None} if skip_none else fields


class LaunchInProgress(KubeModel):
    """Written before a launch call. Found on restart without a result, it means "ask EC2
    with the same client token", never "launch again"."""

    # The first ClientToken EC2 receives for this generation's launch (EC2 accepts up to 64
    # ASCII characters). A marker written by an older controller holds `<uid>/<generation>`
    # here; nothing reads it back (a resumed launch derives its tokens again), so it resumes.
    client_token: str = Field(min_length=1, max_length=64)
    # Every token the launch may send, in order: fleet mode's one, or runinstances mode's
    # one per subnet of the sweep. None in a marker from an older controller.
    client_tokens: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] | None = None
    mode: Mode
    group: str = Field(min_length=1)
    started_at: KubeTime


class ReleaseInProgress(KubeModel):
    """Written before terminating, with the secondary ENIs to delete once they detach."""

    started_at: KubeTime
    reason: str = Field(min_length=1)
    instance_ids: tuple[InstanceId, ...] = ()
    network_interface_ids: tuple[str, ...] = ()


class CapacityBlock(KubeModel):
    """EC2's record of the Capacity Block a pool's gangs run on, as the pool last read it."""

    reservation_id: str = Field(min_length=1)
    ends_at: KubeTime


Money = Annotated[
    Decimal,
    PlainSerializer(str, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string"}),
]


class BlockPurchase(KubeModel):
    """A Capacity Block the pool buys, or bought, for its gangs.

    The intent (everything but `reservation_id`) is written before PurchaseCapacityBlock,
    which takes no ClientToken; the block is tagged with `intent`. The reservation id is
    written when EC2 answers, or when a read of the reservations tagged with the intent
    finds it after a crash or a lost answer. It outlives the claim: a bought block stays
    with the pool, for the next gang of its shape, until it ends."""

    intent: str = Field(min_length=1, max_length=256)
    offering_id: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    instance_count: int = Field(ge=1)
    availability_zone: str = Field(min_length=1)
    upfront_fee: Money
    currency: str = "USD"
    starts_at: KubeTime
    ends_at: KubeTime
    # When the last PurchaseCapacityBlock call under this intent was sent (set before each):
    # an unanswered one is not called again until EC2's tagged listing has stayed empty for
    # blockPurchase.purchaseSettle after it.
    intended_at: KubeTime
    # PurchaseCapacityBlock calls sent under this intent (counted before each is sent):
    # a second only after a tagged read proved the first bought nothing; never a third.
    calls: int = Field(default=1, ge=1, le=2)
    bought_for: str = Field(min_length=1)  # <namespace>/<workload>
    reservation_id: str | None = Field(default=None, min_length=1)


class BlockRefusal(KubeModel):
    """Why no Capacity Block is bought for the claim `claim_uid`: the Workload is rejected
    with `message` (the earliest offering and its fee)."""

    claim_uid: str = Field(min_length=1)
    message: str = Field(min_length=1)


class StackOperation(StrEnum):
    """`status.lastStackOperation`: the pool's last stack operation that succeeded."""

    PREPARE = "prepare"
    RECORD = "record"
    REMOVE_SET = "remove-set"
    DESTROY = "destroy"
    # A prepare that refreshed the stack because a launch met a resource of it gone from AWS.
    REPAIR = "repair"


_LEGACY_RECORD: Final = "record:"


class StackOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class StackResult:
    """`status.lastStackResult`: how the pool's last stack operation ended and, when it
    failed, the failure's reason. On the wire it is the text it always was: "succeeded", or
    "failed: <reason>"."""

    outcome: StackOutcome
    reason: str = ""

    @classmethod
    def succeeded(cls) -> StackResult:
        return cls(StackOutcome.SUCCEEDED)

    @classmethod
    def failed(cls, reason: str) -> StackResult:
        return cls(StackOutcome.FAILED, reason)

    @classmethod
    def parse(cls, value: object) -> StackResult:
        if isinstance(value, StackResult):
            return value
        text = str(value)
        if text == StackOutcome.SUCCEEDED:
            return cls.succeeded()
        head, sep, reason = text.partition(":")
        if head == StackOutcome.FAILED:
            return cls.failed(reason.strip() if sep else "")
        raise ValueError(
            f"lastStackResult {text!r} is neither {StackOutcome.SUCCEEDED!r} nor "
            f"{StackOutcome.FAILED!r} (optionally followed by ': <reason>')"
        )

    def __str__(self) -> str:
        if self.outcome is StackOutcome.FAILED:
            return f"{self.outcome}: {self.reason}"
        return str(self.outcome)


# The CRD keeps both fields plain strings, as they always were.
_StackOperationField = Annotated[StackOperation, WithJsonSchema({"type": "string"})]
_StackResultField = Annotated[
    StackResult,
    PlainValidator(StackResult.parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string"}),
]


class LastError(KubeModel):
    """The pool's last failure, or a planned stop it tells users of (a block's end).

    `operation` and `kind` are set for a failed step: which step failed (a `pool_steps`
    Action value: "prepare", "launch", "record", ...) and what kind of failure it was. The
    next success of that step (or of one that makes it moot, see `pool_outcomes`) clears
    the error, so a healthy pool shows none; the Degraded condition's reason is the kind.
    """

    reason: str = Field(min_length=1)
    message: str
    operation: str | None = Field(default=None, min_length=1)
    kind: FailureKind | None = None


class UnusableNode(KubeModel):
    """A Ready node of the active set that cannot run one gang pod yet, and why."""

    node: str = Field(min_length=1)
    instance_id: InstanceId
    # One phrase per lack: "nvidia.com/gpu: 0 of 8 allocatable", "taint <key>:<effect>".
    missing: tuple[str, ...] = ()


class GangNodePoolStatus(KubeModel):
    phase: Phase = Phase.IDLE
    observed_generation: int = Field(default=0, ge=0)
    # Seeds the launch client token; moves only after a terminal result, so a crash
    # between "EC2 returned" and "IDs saved" repeats the same token.
    acquire_generation: int = Field(default=0, ge=0)
    active_group: str | None = None
    instance_ids: tuple[InstanceId, ...] = ()
    ready_nodes: int = Field(default=0, ge=0)
    # Ready nodes of the active set that are not usable yet (`controllers/pool/usable.py`),
    # with what each lacks; not counted in ready_nodes. None when there is none.
    unusable_nodes: tuple[UnusableNode, ...] | None = None
    keep_warm_until: KubeTime | None = None
    # When the pool last went Idle with no set: its prepared stack (launch template,
    # placement group) is kept for the next claim until `stackOperations.idleStackTTL` later.
    idle_since: KubeTime | None = None
    # The end of the Capacity Block the active set runs on (EC2 reclaims it then); the set
    # is released before it. None when the gang is not on a block.
    capacity_block_ends_at: KubeTime | None = None
    # The Capacity Block the spec names and its end, as EC2 last reported it. Unlike
    # `capacity_block_ends_at` it outlives the set: a Workload that comes back after its
    # block's set was released is refused from it, with nothing asked of EC2.
    capacity_block: CapacityBlock | None = None
    # The Capacity Block bought (or being bought) for the pool's gangs.
    block_purchase: BlockPurchase | None = None
    block_refusal: BlockRefusal | None = None
    consecutive_shortfalls: int = Field(default=0, ge=0)
    # Launches in a row that EC2 answered with a code the catalogue lacks (FailureKind.UNKNOWN):
    # at `unknownErrorAttemptsBeforeRetry` the Workload's check goes to Retry naming the code.
    consecutive_unknown_errors: int = Field(default=0, ge=0)
    # Failed actions in a row of any kind (a stack step, a release, a retryable launch):
    # the retry backoff escalates with it, so no failing step retries at full speed forever.
    consecutive_failures: int = Field(default=0, ge=0)
    last_shortfall_time: KubeTime | None = None
    join_deadline: KubeTime | None = None
    launch_in_progress: LaunchInProgress | None = None
    release_in_progress: ReleaseInProgress | None = None
    stack_name: str | None = None
    last_stack_operation: _StackOperationField | None = None
    # The group whose instance IDs the stack holds (its last successful record); the set is
    # recorded once this equals `active_group`.
    recorded_group: str | None = None
    last_stack_result: _StackResultField | None = None
    # What a launch found gone of the pool's stack (its launch template or placement group,
    # deleted outside the stack): the next prepare refreshes the stack first and makes it
    # again. Cleared when that prepare succeeds.
    stack_drift: str | None = None
    last_error: LastError | None = None
    conditions: tuple[Condition, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _recorded_group_of_older_controllers(cls, body: Any) -> Any:
        """Controllers before `recordedGroup` wrote the record as "record:<group>" in
        `lastStackOperation`: read it as the same fact, so an upgrade records nothing twice."""
        if not isinstance(body, dict):
            return body
        operation = body.get("lastStackOperation", body.get("last_stack_operation"))
        if not isinstance(operation, str) or not operation.startswith(_LEGACY_RECORD):
            return body
        body = {k: v for k, v in body.items() if k not in ("last_stack_operation",)}
        body["lastStackOperation"] = StackOperation.RECORD
        body.setdefault("recordedGroup", operation.removeprefix(_LEGACY_RECORD))
        return body


class GangNodePool(KubeModel):
    api_version: str = c.API_VERSION
    kind: str = c.GNP_KIND
    metadata: ObjectMeta
    spec: GangNodePoolSpec
    status: GangNodePoolStatus = GangNodePoolStatus()

    @property
    def name(self) -> str:
        return self.metadata.name


PRINTER_COLUMNS: Final = (
    {"name": "PHASE", "type": "string", "jsonPath": ".status.phase"},
    {"name": "READY", "type": "integer", "jsonPath": ".status.readyNodes"},
    {"name": "COUNT", "type": "integer", "jsonPath": ".spec.count"},
    {"name": "TYPE", "type": "string", "jsonPath": ".spec.instanceType"},
    {"name": "MODE", "type": "string", "jsonPath": ".spec.mode"},
    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # `kubectl get gnp -o wide` adds these (priority 1): who holds the pool, the reservation
    # it launches into, and why it is failing, if it is.
    {
        "name": "CLAIM NAMESPACE",
        "type": "string",
        "jsonPath": ".spec.claim.namespace",
        "priority": 1,
    },
    {"name": "CLAIM", "type": "string", "jsonPath": ".spec.claim.name", "priority": 1},
    {
        "name": "RESERVATION",
        "type": "string",
        "jsonPath": ".spec.capacityReservationId",
        "priority": 1,
    },
    {"name": "LAST ERROR", "type": "string", "jsonPath": ".status.lastError.reason", "priority": 1},
    {
        "name": "NOT USABLE",
        "type": "string",
        "jsonPath": ".status.unusableNodes[0].missing[0]",
        "priority": 1,
    },
)
"""`kubectl get gnp` columns, as in the CRD's additionalPrinterColumns."""


def load_crd() -> dict[str, Any]:
    """The GangNodePool CustomResourceDefinition, ready to create."""
    text = resources.files("provisioner.api").joinpath("crds/gangnodepool.yaml").read_text()
    return cast(dict[str, Any], yaml.safe_load(text))
