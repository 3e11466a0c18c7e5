"""Every name the product shares with users, Kueue, EC2 and Pulumi, in one place.

The values are the reference controller's, so a user switching to this controller keeps
their Jobs, queues and dashboards. Nothing here is computed; modules that build a name
from these parts (instance-profile names, client tokens) live next to their users.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

GROUP: Final = "atomic-gang.k8s.aws"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
PREFIX: Final = f"{GROUP}/"

# --- GangNodePool CRD -------------------------------------------------------------------
GNP_KIND: Final = "GangNodePool"
GNP_PLURAL: Final = "gangnodepools"
GNP_SINGULAR: Final = "gangnodepool"
GNP_SHORT_NAME: Final = "gnp"

# --- GangClass CRD: a queue's shape defaults, named by our AdmissionCheck's parameters ----
GANG_CLASS_KIND: Final = "GangClass"
GANG_CLASS_PLURAL: Final = "gangclasses"
GANG_CLASS_SINGULAR: Final = "gangclass"
GANG_CLASS_SHORT_NAME: Final = "gcl"

CONTROLLER_NAME: Final = f"{GROUP}/ec2-atomic"
FINALIZER: Final = f"{GROUP}/release"
FIELD_MANAGER: Final = "atomic-gang-provisioner"

# --- Kueue ------------------------------------------------------------------------------
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
QUEUE_NAME_LABEL: Final = f"{KUEUE_GROUP}/queue-name"

# --- Job labels and annotations (user-facing; keep the reference's spelling) ------------
POOL_LABEL: Final = f"{PREFIX}pool"
GROUP_LABEL: Final = f"{PREFIX}group"
GANG_TAINT_KEY: Final = f"{PREFIX}gang"

ANN_COUNT: Final = f"{PREFIX}count"
ANN_INSTANCE_TYPE: Final = f"{PREFIX}instance-type"
ANN_MODE: Final = f"{PREFIX}mode"
ANN_REGION: Final = f"{PREFIX}region"
ANN_AVAILABILITY_ZONES: Final = f"{PREFIX}availability-zones"
ANN_SUBNETS: Final = f"{PREFIX}subnets"
ANN_NODE_ROLE_ARN: Final = f"{PREFIX}node-role-arn"
ANN_KEEP_WARM_TTL: Final = f"{PREFIX}keep-warm-ttl"
ANN_MAX_LIFETIME: Final = f"{PREFIX}max-lifetime"
ANN_AMI_VARIANT: Final = f"{PREFIX}ami-variant"
ANN_AMI_ID: Final = f"{PREFIX}ami-id"
ANN_CAPACITY_RESERVATION_ID: Final = f"{PREFIX}capacity-reservation-id"
# Not in the reference: GPU gangs ask for EFA and a cluster placement group with these.
ANN_EFA: Final = f"{PREFIX}efa"
ANN_PLACEMENT_GROUP: Final = f"{PREFIX}placement-group"
# Not in the reference: a gang that asks for time, not capacity; the controller buys a
# Capacity Block of this duration when the installer allows it (`blockPurchase`).
ANN_CAPACITY_BLOCK_DURATION: Final = f"{PREFIX}capacity-block-duration"

GANG_ANNOTATIONS: Final = (
    ANN_COUNT,
    ANN_INSTANCE_TYPE,
    ANN_MODE,
    ANN_REGION,
    ANN_AVAILABILITY_ZONES,
    ANN_SUBNETS,
    ANN_NODE_ROLE_ARN,
    ANN_KEEP_WARM_TTL,
    ANN_MAX_LIFETIME,
    ANN_AMI_VARIANT,
    ANN_AMI_ID,
    ANN_CAPACITY_RESERVATION_ID,
    ANN_EFA,
    ANN_PLACEMENT_GROUP,
    ANN_CAPACITY_BLOCK_DURATION,
)

# --- EC2 tags (set atomically at launch through TagSpecifications) ----------------------
TAG_MANAGED: Final = f"{PREFIX}managed"
TAG_CLUSTER: Final = f"{PREFIX}cluster"
TAG_POOL: Final = f"{PREFIX}pool"
TAG_GROUP: Final = f"{PREFIX}group"
TAG_MAX_LIFETIME: Final = f"{PREFIX}max-lifetime"
TAG_KEEP_WARM_UNTIL: Final = f"{PREFIX}keep-warm-until"
# On a capacity reservation (ODCR or Capacity Block) the installer or its owner tags: the
# cluster may launch into it (TAG_CLUSTER), and, when set, only gang Jobs of these
# namespaces (space-separated) may name it (`api.reservation_policy`).
TAG_NAMESPACE: Final = f"{PREFIX}namespace"
# On a Capacity Block the controller buys, with TAG_CLUSTER, TAG_POOL and TAG_NAMESPACE: the
# Workload it was bought for, and the purchase's intent (`status.blockPurchase.intent`),
# which the pool looks for before it may call PurchaseCapacityBlock again (no ClientToken).
TAG_WORKLOAD: Final = f"{PREFIX}workload"
TAG_PURCHASE_INTENT: Final = f"{PREFIX}purchase-intent"


def cluster_ownership_tag(cluster_name: str) -> str:
    """The tag key EKS and the VPC CNI use to recognise a cluster's own resources."""
    return f"kubernetes.io/cluster/{cluster_name}"


INSTANCE_PROFILE_PREFIX: Final = "atomic-gang-instance-profile-"
VPC_CNI_ENI_DESCRIPTION_PREFIX: Final = "aws-K8S-"

# --- Modes, variants, phases ------------------------------------------------------------
MODE_RUNINSTANCES: Final = "runinstances"
MODE_FLEET: Final = "fleet"
MODES: Final = (MODE_RUNINSTANCES, MODE_FLEET)

AMI_STANDARD: Final = "standard"
AMI_NVIDIA: Final = "nvidia"
AMI_NEURON: Final = "neuron"
AMI_VARIANTS: Final = (AMI_STANDARD, AMI_NVIDIA, AMI_NEURON)

PLACEMENT_NONE: Final = "none"
PLACEMENT_CLUSTER: Final = "cluster"
PLACEMENT_STRATEGIES: Final = (PLACEMENT_NONE, PLACEMENT_CLUSTER)

# Extended resources GPU gangs request; Kueue's queues cover them by default.
RESOURCE_GPU: Final = "nvidia.com/gpu"
RESOURCE_EFA: Final = "vpc.amazonaws.com/efa"
# Their default ClusterQueue quotas (bootstrap, chart, local environment): one gang of 64
# (limits.maxGangSize) p5.48xlarge nodes, 8 GPUs and 32 EFA interfaces each.
DEFAULT_ACCELERATOR_QUOTA: Final = {RESOURCE_GPU: "512", RESOURCE_EFA: "2048"}


class Phase(StrEnum):
    """A GangNodePool's phase (`status.phase`), in the order of its life cycle."""

    IDLE = "Idle"
    ACQUIRING = "Acquiring"
    JOINING = "Joining"
    SATISFIED = "Satisfied"
    KEEP_WARM = "KeepWarm"
    RELEASING = "Releasing"


# --- Kueue admission-check states (kueue.x-k8s.io/v1beta2 CheckState) -------------------
class CheckState(StrEnum):
    """The state of an admission check on a Workload (`status.admissionChecks[].state`),
    with Kueue's values: the one type the decision, the model and the JSON patch share."""

    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"  # Kueue releases the quota and requeues the Workload
    REJECTED = "Rejected"  # Kueue deactivates the Workload


# --- Integration modes ------------------------------------------------------------------
INTEGRATION_ADMISSIONCHECK: Final = "admissioncheck"

# --- Gang-shape refusal reasons (machine reasons carried by GangShapeError) ---------------
REASON_MISSING_LABEL: Final = "MissingLabel"
REASON_INVALID_LABEL: Final = "InvalidLabel"
REASON_MISSING_ANNOTATION: Final = "MissingAnnotation"
REASON_INVALID_ANNOTATION: Final = "InvalidAnnotation"
REASON_UNKNOWN_ANNOTATION: Final = "UnknownAnnotation"
REASON_CONFLICTING_ANNOTATIONS: Final = "ConflictingAnnotations"
REASON_NOT_ALLOWED: Final = "NotAllowed"
REASON_EXCEEDS_LIMIT: Final = "ExceedsLimit"
REASON_COUNT_MISMATCH: Final = "CountMismatch"
# The Job names a pool that belongs to another namespace (and is not shared with its own).
REASON_POOL_OF_ANOTHER_NAMESPACE: Final = "PoolOfAnotherNamespace"
# Used when one error carries problems with different reasons.
REASON_INVALID_GANG_SHAPE: Final = "InvalidGangShape"

# --- Kueue condition types (kueue.x-k8s.io/v1beta2) -------------------------------------
WL_QUOTA_RESERVED: Final = "QuotaReserved"
WL_ADMITTED: Final = "Admitted"
WL_FINISHED: Final = "Finished"
WL_EVICTED: Final = "Evicted"
WL_PREEMPTED: Final = "Preempted"
WL_REQUEUED: Final = "Requeued"
WL_PODS_READY: Final = "PodsReady"
# v1beta2 has no "Deactivated" condition: deactivation is spec.active=false, announced by
# this temporary condition and then an Evicted condition with reason "Deactivated".
WL_DEACTIVATION_TARGET: Final = "DeactivationTarget"
WL_EVICTED_REASON_DEACTIVATED: Final = "Deactivated"
AC_ACTIVE: Final = "Active"
# The reason of our AdmissionChecks' Active condition.
AC_ACTIVE_REASON: Final = "ControllerReady"
# Its reasons when False: the class its parameters name is missing, or no Job could use it.
AC_REASON_CLASS_NOT_FOUND: Final = "GangClassNotFound"
AC_REASON_CLASS_INVALID: Final = "GangClassInvalid"
AC_REASON_BAD_PARAMETERS: Final = "UnsupportedParameters"
# Kueue caps AdmissionCheckState.message at this many characters.
CHECK_MESSAGE_MAX_LENGTH: Final = 32768
JSON_PATCH_CONTENT_TYPE: Final = "application/json-patch+json"


# --- Event types and reasons ----------------------------------------------------------
# Kubernetes Events on GangNodePools and Workloads; also the reasons of the pool's
# release record and of our admission-check updates. Users grep and alert on these.
EVENT_NORMAL: Final = "Normal"
EVENT_WARNING: Final = "Warning"


class EventReason(StrEnum):
    """Every reason the product chooses for an Event: the one vocabulary users grep and
    alert on (`make lint` refuses a literal reason). A failure's Event carries the
    failure's own reason instead (an EC2 error code, a stack failure, a gang-shape
    refusal's `REASON_*`): that is relayed, not chosen."""

    # GangNodePool life cycle (pool_plan, pool_outcomes)
    ACQUIRING = "Acquiring"
    LAUNCHED = "Launched"
    CAPACITY_SHORTFALL = "CapacityShortfall"
    UNKNOWN_AWS_ERROR = "UnknownAwsError"
    LAUNCH_FAILED = "LaunchFailed"
    ACTION_FAILED = "Failed"
    SATISFIED = "Satisfied"
    NODE_NOT_READY = "NodeNotReady"
    JOIN_DEADLINE_EXCEEDED = "JoinDeadlineExceeded"
    GANG_BROKEN = "GangBroken"
    KEEP_WARM = "KeepWarm"
    KEEP_WARM_EXPIRED = "KeepWarmExpired"
    STRAY_INSTANCES = "StrayInstances"
    # Tagged as the pool's, in no set, and not proven ours by EC2's record: left running.
    UNPROVEN_INSTANCES = "UnprovenInstances"
    # A launch's rollback EC2 has not yet shown terminating: the pool releases those ids.
    ROLLBACK_UNCONFIRMED = "RollbackUnconfirmed"
    # A launch's rollback EC2 shows terminating: the pool still releases those ids by id, for
    # the ENIs a node that joined before the rollback leaves.
    ROLLED_BACK = "RolledBack"
    POOL_DELETED = "PoolDeleted"
    RELEASED = "Released"
    STACK_IDLE = "StackIdle"
    # An unclaimed pool prepares its stack for a Workload still waiting for quota.
    PREPARING_AHEAD = "PreparingAhead"
    CAPACITY_BLOCK_ENDING = "CapacityBlockEnding"  # a set released before its block's end
    CAPACITY_BLOCK_ENDED = "CapacityBlockEnded"  # the block has no time left for a new gang
    # Buying a Capacity Block (`plan_purchase`): the intent before the call, the block bought
    # or found by its intent's tag, nothing under the cap in time, a purchase whose answer
    # is unknown, and a bought block held for the next gang after its Workload left.
    BUYING_CAPACITY_BLOCK = "BuyingCapacityBlock"
    CAPACITY_BLOCK_BOUGHT = "CapacityBlockBought"
    NO_AFFORDABLE_CAPACITY_BLOCK = "NoAffordableCapacityBlock"
    CAPACITY_BLOCK_PURCHASE_UNKNOWN = "CapacityBlockPurchaseUnknown"
    CAPACITY_BLOCK_HELD = "CapacityBlockHeld"
    STACK_DRIFT = "StackDrift"  # a launch met a resource of the stack deleted outside it
    STACK_REPAIRED = "StackRepaired"  # the stack made it again
    # EC2 does not see the instance profile the stack just made or verified (IAM propagation)
    INSTANCE_PROFILE_PROPAGATING = "InstanceProfilePropagating"
    # Workload admission check (workload_decision), and the Workload reconciler's Events on
    # the pool and the gang's owner. A claim says CLAIMED on the pool and the owner, and
    # POOL_CLAIMED with the check's Pending write (on the Workload and the owner). A pool
    # made for a Workload says POOL_CREATED once on each of the pool, Workload and owner.
    POOL_CREATED = "PoolCreated"
    CLAIMED = "Claimed"
    CLAIM_RELEASED = "ClaimReleased"
    SHAPE_CONFLICT = "ShapeConflict"
    POOL_BUSY = "PoolBusy"
    POOL_CLAIMED = "PoolClaimed"
    GANG_READY = "GangReady"
    GANG_LOST = "GangLost"
    WAITING = "Waiting"
    # A pool from before pools belonged to a namespace holds warm nodes whose last
    # namespace is unknown: no claimant gets them; it waits for their release.
    WARM_NODES_OF_UNKNOWN_NAMESPACE = "WarmNodesOfUnknownNamespace"
    # The Workload's owner is of a kind no gang is read from (or it has none).
    UNSUPPORTED_OWNER_KIND = "UnsupportedOwnerKind"


# --- Failure kinds ----------------------------------------------------------------------
class FailureKind(StrEnum):
    """What a failed action means for the pool's next try, whoever failed (the EC2 engine or
    a stack operation). It travels as this type from the failure to `pool_outcomes`,
    which picks the wait from it: a capacity shortfall moves the generation and backs off,
    a transient failure takes the retry backoff, a configuration failure the longer config
    delay (a person has to fix something first)."""

    CAPACITY = "capacity"  # EC2 has no room for N now; nothing is left running
    MALFORMED = "malformed"  # EC2 answered with a count other than N (rolled back; what is
    # not yet confirmed terminating rides on the result and the pool releases it)
    RETRYABLE = "retryable"  # transient: throttling, outages, a lock, a release still going
    CONFIG = "config"  # can never succeed as written; the message names the fix
    NOT_PREPARED = "not-prepared"  # the pool's stack is not there yet (prepare comes first)
    NOT_ACTIVE = "not-active"  # a Capacity Block not started yet: hold at $0 until it does
    UNKNOWN = "unknown"  # an AWS code the catalogue lacks: retried like RETRYABLE, counted,
    # and after `unknownErrorAttemptsBeforeRetry` in a row the Workload's check goes to Retry


# --- GangNodePool conditions (metav1.Condition; `pool_conditions` writes them) ----------
class PoolCondition(StrEnum):
    """The condition types on `GangNodePool.status.conditions`, read by `kubectl wait`, Argo
    CD health checks and Flux health expressions."""

    READY = "Ready"  # the whole set of N nodes is Ready (Satisfied, or KeepWarm)
    PROGRESSING = "Progressing"  # acquiring, joining or releasing a set
    DEGRADED = "Degraded"  # an operation of the pool is failing (see `lastError`)


class DegradedReason(StrEnum):
    """The Degraded condition's reason when True: the failure kind of the operation that
    failed (`FailureKind`), in the CamelCase conditions use."""

    CAPACITY_SHORTFALL = "CapacityShortfall"  # FailureKind.CAPACITY
    PARTIAL_ANSWER = "PartialAnswer"  # FailureKind.MALFORMED
    TRANSIENT_FAILURE = "TransientFailure"  # FailureKind.RETRYABLE
    CONFIGURATION_ERROR = "ConfigurationError"  # FailureKind.CONFIG
    STACK_NOT_PREPARED = "StackNotPrepared"  # FailureKind.NOT_PREPARED
    UNKNOWN_AWS_ERROR = "UnknownAwsError"  # FailureKind.UNKNOWN
    # The Degraded condition's reason when False.
    NO_FAILURE = "NoFailure"


# --- Settings ---------------------------------------------------------------------------
ENV_PREFIX: Final = "ATOMIC_GANG_"
