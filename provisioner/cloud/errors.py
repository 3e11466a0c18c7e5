"""Every failure the EC2 engine reports, and how an AWS error code is sorted into one.

Called by every module in ``provisioner.cloud`` that talks to AWS (to turn a botocore error
into a :class:`CloudError`) and by the GangNodePool reconciler and the reaper (to decide what
to do next from ``CloudError.kind`` alone, without knowing a single AWS error code).

Hierarchy::

    Exception
     ├── CloudError(kind, code, reason, message)   anything the engine could not do
     │     kind=CAPACITY   EC2 has no room (or no quota) for N now; nothing is left running.
     │                     Terminal for the acquire generation: move it, back off, retry whole.
     │     kind=MALFORMED  EC2 answered with a count other than N; every returned instance was
     │                     terminated first. Terminal for the generation, like CAPACITY.
     │     kind=RETRYABLE  throttling, 5xx, a dropped connection: same generation, same tokens.
     │     kind=CONFIG     the request can never succeed as written; ``message`` names the fix.
     │                     Except a resource of the pool's stack gone from EC2 (its launch
     │                     template, its placement group: ``STACK_RESOURCE_GONE_CODES``),
     │                     whose ``failure`` is NOT_PREPARED: the pool re-prepares its stack.
     │     kind=NOT_FOUND  the thing asked about does not exist (release treats it as done).
     │     kind=NOT_ACTIVE a reservation that has not started: nothing was asked of EC2;
     │                     hold at $0 until ``starts_at`` (ReservationNotActive carries it).
     │     kind=UNKNOWN    a code this module has never seen; surfaced verbatim, backed off.
     │     └── ReservationNotActive(starts_at)   kind=NOT_ACTIVE
     └── ValueError
           └── InvalidUserDataError   user data that is not a nodeadm NodeConfig

Why the capacity set is what it is: it holds the codes that mean "this placement cannot take
N instances right now" and that a later attempt, or another AZ, may not hit. Two neighbours
are kept apart because the sweep must treat them differently:

* ``Unsupported`` (the type is not offered in that AZ) moves the sweep on like a shortfall,
  but if *every* subnet says so no wait will help: the sweep reports CONFIG.
* ``InstanceLimitExceeded`` / ``VcpuLimitExceeded`` (and ``MaxFleetCountExceeded``, the EBS and
  network-interface quotas) are regional quotas: the next subnet gets the same answer, so the
  sweep stops at once. They are reported as CAPACITY (nothing runs,
  the gang waits, quota frees when other instances stop) with reason ``QuotaExceeded`` so the
  message can name the real fix, a Service Quotas increase.

``MaxSpotInstanceCountExceeded`` is left out on purpose: the engine never asks for Spot, so
that code would mean a launch template we did not expect, which UNKNOWN surfaces better.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final

from botocore.exceptions import (  # type: ignore[import-untyped,unused-ignore]
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
)

from provisioner.api import constants as c


class ErrorKind(StrEnum):
    CAPACITY = "Capacity"
    MALFORMED = "Malformed"
    RETRYABLE = "Retryable"
    CONFIG = "Config"
    NOT_FOUND = "NotFound"
    NOT_ACTIVE = "NotActive"
    UNKNOWN = "Unknown"


# --- code sets --------------------------------------------------------------------------
# Per-placement shortfalls: another subnet/AZ, or the same one later, may have room.
CAPACITY_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacityOnHost",
        "InsufficientCapacity",
        "ReservationCapacityExceeded",
        "InsufficientFreeAddressesInSubnet",
        # CreateFleet: no spare capacity for the request as written (EC2's error-code list).
        "UnfulfillableCapacity",
    }
)
# The instance type is not offered where we asked; see the module docstring.
UNOFFERED_CODES: Final = frozenset({"Unsupported"})
# Regional account quotas: every subnet answers the same, so a sweep stops at the first.
QUOTA_CODES: Final = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        # CreateFleet: the account's count of fleets (instant ones included) is at its quota.
        "MaxFleetCountExceeded",
        # EBS and ENI quotas a launch can meet: every subnet answers the same.
        "VolumeLimitExceeded",
        "MaxIOPSLimitExceeded",
        "NetworkInterfaceLimitExceeded",
    }
)

RETRYABLE_CODES: Final = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "SlowDown",
        "PriorRequestNotComplete",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServerException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        # Credentials from Pod Identity/IRSA rotate; the next call picks up fresh ones.
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "IDPCommunicationError",
    }
)

NOT_FOUND_CODES: Final = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidNetworkInterfaceID.NotFound",
        "InvalidFleetId.NotFound",
        "InvalidAttachmentID.NotFound",
    }
)

CONFIG_CODES: Final = frozenset(
    {
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidParameter",
        "MissingParameter",
        "UnknownParameter",
        "ValidationError",
        "ValidationException",
        "InvalidRequest",
        "InvalidRequestException",
        "InvalidInstanceType",
        "InvalidBlockDeviceMapping",
        "InvalidUserData.Malformed",
        "EbsOptimizedNotSupported",
        "InvalidInterface.IpAddressLimitExceeded",
        "TagLimitExceeded",
        "InvalidTagKey.Malformed",
        "UnsupportedOperation",
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "OptInRequired",
        "Blocked",
        "PendingVerification",
        # As a code, the request can never succeed with this token; ``Ec2Engine.acquire``
        # turns it into a generation move (MALFORMED) once no instance of the token lives.
        "IdempotentParameterMismatch",
        # CreateFleet: two overrides name one instance pool (type and zone); the request can
        # never succeed as written, so the same ClientToken is not replayed.
        "InvalidFleetConfig",
        "ParameterNotFound",
        "NoSuchEntity",
        "ResourceNotFoundException",
    }
)
# --- a cluster placement group in use in another zone -----------------------------------
# "Placement groups for your Amazon EC2 instances": a cluster group lives in one zone, so a
# launch elsewhere is refused while it holds instances there (users' reports agree on the
# code). A pool's own group holds only its own sets, so this is the last set still
# shutting down, or a stray: a per-zone refusal (the sweep moves on, and the group's zone
# can take the gang), and a wait at $0 when no zone can, never a config error.
PLACEMENT_ZONE_CODES: Final = frozenset({"InvalidPlacementGroup.InUse"})

# A resource the pool's stack made is gone (deleted outside the stack): the launch named it
# and EC2 does not have it. No wait fixes it and nothing is wrong with the user's shape; the
# pool goes back to its stack's prepare, which refreshes the stack and makes it again
# (``FailureKind.NOT_PREPARED``).
STACK_RESOURCE_GONE_CODES: Final = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.NotFoundException",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.VersionNotFound",
        "InvalidPlacementGroup.Unknown",
    }
)
# Families of codes whose suffix varies (.NotFound, .Malformed, .Unknown, ...).
CONFIG_PREFIXES: Final = (
    "InvalidAMIID.",
    "InvalidSubnetID.",
    "InvalidSubnet.",
    "InvalidIamInstanceProfile.",
    "InvalidCapacityReservationId.",
    "InvalidLaunchTemplateId.",
    "InvalidLaunchTemplateName.",
    "InvalidGroup.",
    "InvalidSecurityGroupID.",
    "InvalidPlacementGroup.",
    "InvalidKeyPair.",
)


def classify_code(code: str, http_status: int | None = None) -> ErrorKind:
    """Sort one AWS error code (also the ``ErrorCode`` of a CreateFleet ``Errors`` entry)."""
    if (
        code in CAPACITY_CODES
        or code in UNOFFERED_CODES
        or code in QUOTA_CODES
        or code in PLACEMENT_ZONE_CODES
    ):
        return ErrorKind.CAPACITY
    if code in RETRYABLE_CODES:
        return ErrorKind.RETRYABLE
    if code in NOT_FOUND_CODES:
        return ErrorKind.NOT_FOUND
    if code in CONFIG_CODES or code.startswith(CONFIG_PREFIXES):
        return ErrorKind.CONFIG
    if http_status is not None and http_status >= 500:
        return ErrorKind.RETRYABLE
    return ErrorKind.UNKNOWN


def error_code(exc: BaseException) -> str | None:
    """The AWS error code carried by ``exc``, if it carries one."""
    if isinstance(exc, CloudError):
        return exc.code
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return str(code) if code else None
    return None


def _http_status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def classify(exc: BaseException) -> ErrorKind:
    """The kind of any exception raised while talking to AWS."""
    if isinstance(exc, CloudError):
        return exc.kind
    if isinstance(exc, ClientError):
        return classify_code(error_code(exc) or "", _http_status(exc))
    # Connection refused/reset, read and connect timeouts: nothing reached EC2 or the answer
    # was lost; an idempotent replay with the same token is the right move.
    if isinstance(exc, ConnectionError | HTTPClientError):
        return ErrorKind.RETRYABLE
    if isinstance(exc, BotoCoreError):
        # Missing credentials, unknown region, parameter validation in the SDK itself.
        return ErrorKind.CONFIG
    return ErrorKind.UNKNOWN


def is_capacity(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.CAPACITY


def is_retryable(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.RETRYABLE


def is_config(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.CONFIG


def is_not_found(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.NOT_FOUND


def is_quota(code: str | None) -> bool:
    return code in QUOTA_CODES


def is_unoffered(code: str | None) -> bool:
    return code in UNOFFERED_CODES


# What each kind means for the pool's next launch (``constants.FailureKind``). Anything not
# known to be final is retryable: replaying the same ClientToken can never double-launch.
_FAILURE_OF_KIND: Final = {
    ErrorKind.CAPACITY: c.FailureKind.CAPACITY,
    ErrorKind.MALFORMED: c.FailureKind.MALFORMED,
    ErrorKind.CONFIG: c.FailureKind.CONFIG,
    ErrorKind.NOT_ACTIVE: c.FailureKind.NOT_ACTIVE,
}


class CloudError(Exception):
    """A failure of the EC2 engine, sorted into a kind, with a reason and a sentence for users.

    ``reason`` is a CamelCase word fit for a condition reason or an event reason; ``message``
    says what happened and what a person can do about it. ``instance_ids`` lists instances
    that may still exist because of this failure (a rollback that itself failed), so the
    caller can persist them and release them later. ``rolled_back`` lists the instances a
    rollback did terminate (EC2 shows them going): the release still owes them its ENI
    cleanup, since a node that joined before the rollback (a set adopted after a crash, a
    launch answered again) carries a VPC CNI ENI that outlives its instance.
    """

    def __init__(
        self,
        kind: ErrorKind,
        code: str | None,
        reason: str,
        message: str,
        *,
        instance_ids: tuple[str, ...] = (),
        rolled_back: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.kind = kind
        self.code = code
        self.reason = reason
        self.message = message
        self.instance_ids = instance_ids
        self.rolled_back = rolled_back

    @property
    def failure(self) -> c.FailureKind:
        """This failure as the pool's state machine acts on it."""
        if self.code in STACK_RESOURCE_GONE_CODES:
            return c.FailureKind.NOT_PREPARED
        return _FAILURE_OF_KIND.get(self.kind, c.FailureKind.RETRYABLE)

    @property
    def ends_generation(self) -> bool:
        """True when the acquire generation must move before the next launch attempt."""
        return self.kind in (ErrorKind.CAPACITY, ErrorKind.MALFORMED)

    def __repr__(self) -> str:
        return (
            f"CloudError(kind={self.kind.value!r}, code={self.code!r}, "
            f"reason={self.reason!r}, message={self.message!r})"
        )


# --- reasons and the fix each one names -------------------------------------------------
_CAPACITY_FIX: Final = (
    "Nothing was left running; the gang stays pending at $0 and is retried whole. For large "
    f"gangs reserve capacity (On-Demand Capacity Reservation or Capacity Block) and set "
    f"{c.ANN_CAPACITY_RESERVATION_ID}, or allow more availability zones."
)

_EXACT: Final[dict[str, tuple[str, str]]] = {
    "InvalidPlacementGroup.InUse": (
        "PlacementGroupInAnotherZone",
        "The pool's cluster placement group holds instances in another zone, and EC2 keeps "
        "a cluster group in one zone; the gang is launched in that zone, or retried whole at "
        "$0 once they have terminated. If none of the pool's sets is shutting down, "
        "terminate what else runs in the group (aws ec2 describe-instances --filters "
        "Name=placement-group-name,Values=<group>).",
    ),
    "InvalidFleetConfig": (
        "InvalidFleetConfig",
        "EC2 refused the fleet's overrides (two name one instance type in one zone); name at "
        f"most one subnet per zone in {c.ANN_SUBNETS}, or use mode runinstances.",
    ),
    "ReservationCapacityExceeded": (
        "ReservationFull",
        "The capacity reservation has fewer free slots than the gang needs; free instances "
        f"in it, enlarge it, or point {c.ANN_CAPACITY_RESERVATION_ID} at another one.",
    ),
    "InsufficientFreeAddressesInSubnet": (
        "SubnetFull",
        "The subnet has too few free IP addresses for the gang (one per network interface); "
        "the next attempt takes the zone's subnet with the most free addresses. Add subnets "
        f"to {c.ANN_SUBNETS} or free addresses in it.",
    ),
    "UnfulfillableCapacity": (
        "InsufficientCapacity",
        "EC2 has no spare capacity for the fleet as asked. " + _CAPACITY_FIX,
    ),
    "InsufficientCapacityOnHost": (
        "InsufficientCapacity",
        "The Dedicated Host has no room for the instance type; the gang is retried whole. "
        "Launch on default tenancy or free the host.",
    ),
    "MaxFleetCountExceeded": (
        "QuotaExceeded",
        "The account is at its quota of EC2 Fleets; delete unused fleets "
        "(aws ec2 delete-fleets) or request a Service Quotas increase, or use mode "
        "runinstances.",
    ),
    "VolumeLimitExceeded": (
        "QuotaExceeded",
        "The account's EBS storage quota is reached; request a Service Quotas increase for "
        "EBS in this region or delete unused volumes.",
    ),
    "MaxIOPSLimitExceeded": (
        "QuotaExceeded",
        "The account's EBS IOPS quota is reached; request a Service Quotas increase for "
        "EBS IOPS in this region.",
    ),
    "NetworkInterfaceLimitExceeded": (
        "QuotaExceeded",
        "The account's network-interface quota is reached (EFA nodes use one per card); "
        "request a Service Quotas increase for VPC network interfaces.",
    ),
    "InvalidInterface.IpAddressLimitExceeded": (
        "InvalidNetworkInterfaces",
        "A network interface asks for more addresses than the instance type allows; launch "
        "without extra addresses or choose another type.",
    ),
    "EbsOptimizedNotSupported": (
        "InvalidRequest",
        "The instance type does not support EBS optimization as the launch template asks; "
        "choose another instance type.",
    ),
    "TagLimitExceeded": (
        "InvalidTags",
        "The launch carries more than 50 tags; remove tags from the pool's settings.",
    ),
    "InvalidTagKey.Malformed": (
        "InvalidTags",
        "A tag key is not valid (aws: is reserved, at most 128 characters); fix the pool's tags.",
    ),
    "Unsupported": (
        "InstanceTypeNotOffered",
        "The instance type is not offered in this availability zone; choose zones that offer "
        f"it in {c.ANN_AVAILABILITY_ZONES} (see `aws ec2 describe-instance-type-offerings`).",
    ),
    "InstanceLimitExceeded": (
        "QuotaExceeded",
        "The account's EC2 instance quota is too low for this gang; request a Service Quotas "
        "increase for the instance family in this region.",
    ),
    "VcpuLimitExceeded": (
        "QuotaExceeded",
        "The account's On-Demand vCPU quota for this instance family is too low for the gang; "
        "request a Service Quotas increase in this region.",
    ),
    "IdempotentParameterMismatch": (
        "ClientTokenReused",
        "A launch with this pool and acquire generation was already made with different "
        "parameters (a new AMI, template version or subnet since); the controller moves the "
        "acquire generation once no instance of the earlier launch is alive, and launches "
        "with a fresh token.",
    ),
    "ParameterNotFound": (
        "AmiParameterNotFound",
        "No EKS-optimized AL2023 AMI is published for this Kubernetes version, architecture "
        f"and variant; set {c.ANN_AMI_ID} or a different {c.ANN_AMI_VARIANT}.",
    ),
    "NoSuchEntity": (
        "InstanceProfileNotFound",
        "The node instance profile does not exist; create "
        f"{c.INSTANCE_PROFILE_PREFIX}<cluster>-<role-name> holding the node role, or let the "
        "controller manage it (iam.selfManageInstanceProfile=true).",
    ),
}
_PREFIXED: Final[tuple[tuple[str, str, str], ...]] = (
    (
        "InvalidAMIID.",
        "InvalidAMI",
        f"Set {c.ANN_AMI_ID} to an AMI that exists in this region, or remove it to use the "
        "EKS-optimized AL2023 AMI.",
    ),
    (
        "InvalidSubnet",
        "InvalidSubnet",
        f"Fix {c.ANN_SUBNETS}: every subnet must exist in the cluster's VPC and region.",
    ),
    (
        "InvalidIamInstanceProfile.",
        "InstanceProfileNotFound",
        "The node instance profile is missing or not yet visible to EC2; create "
        f"{c.INSTANCE_PROFILE_PREFIX}<cluster>-<role-name> holding the node role.",
    ),
    (
        "InvalidCapacityReservationId.",
        "InvalidCapacityReservation",
        f"Fix {c.ANN_CAPACITY_RESERVATION_ID}: it must name an active reservation (cr-...) in "
        "this region whose instance type and zone match the gang.",
    ),
    (
        "InvalidLaunchTemplate",
        "LaunchTemplateNotFound",
        "The pool's launch template is gone (deleted outside the pool's stack); the pool goes "
        "back to its stack's prepare, which refreshes the stack and makes the template again.",
    ),
    (
        "InvalidGroup.",
        "InvalidSecurityGroup",
        "A security group passed to the nodes does not exist in the cluster's VPC.",
    ),
    (
        "InvalidSecurityGroupID.",
        "InvalidSecurityGroup",
        "A security group passed to the nodes does not exist in the cluster's VPC.",
    ),
    (
        "InvalidPlacementGroup.",
        "InvalidPlacementGroup",
        "The cluster placement group is missing or in another zone; a missing one (deleted "
        "outside the pool's stack) is made again by the stack's prepare, which refreshes the "
        "stack first.",
    ),
)
_ACCESS: Final = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)


def describe_code(code: str | None, kind: ErrorKind) -> tuple[str, str]:
    """The (reason, fix sentence) users see for ``code``."""
    if code in _EXACT:
        return _EXACT[code]
    for prefix, reason, fix in _PREFIXED:
        if code and code.startswith(prefix):
            return reason, fix
    if code in _ACCESS:
        return (
            "AccessDenied",
            "The controller's IAM identity lacks a permission this call needs; attach the "
            "controller policy (IAM appendix) to its role and check iam:PassRole for the "
            "node role.",
        )
    if kind is ErrorKind.CAPACITY:
        return "InsufficientCapacity", _CAPACITY_FIX
    if kind is ErrorKind.RETRYABLE:
        return "AwsUnavailable", "A transient AWS failure; the call is retried with backoff."
    if kind is ErrorKind.CONFIG:
        return "InvalidRequest", "AWS rejected the request as written; fix the pool's shape."
    if kind is ErrorKind.NOT_FOUND:
        return "NotFound", "The resource no longer exists."
    return "UnknownAwsError", "An AWS error this controller does not know; it is retried."


def to_cloud_error(exc: BaseException, action: str) -> CloudError:
    """Wrap any exception from an AWS call made while doing ``action`` (a short phrase)."""
    if isinstance(exc, CloudError):
        return exc
    kind = classify(exc)
    code = error_code(exc)
    if code is None and isinstance(exc, ConnectionError | HTTPClientError):
        code = type(exc).__name__
    reason, fix = describe_code(code, kind)
    aws_says = (
        exc.response.get("Error", {}).get("Message", "")
        if isinstance(exc, ClientError)
        else str(exc)
    )
    detail = f" ({code}: {aws_says})" if code else f" ({aws_says})"
    return CloudError(kind, code, reason, f"{action} failed{detail}. {fix}")


class ReservationNotActive(CloudError):
    """A capacity reservation that cannot be launched into yet; ``starts_at`` is when it
    can (None when EC2 gives no start, e.g. a reservation still being assessed)."""

    def __init__(self, reason: str, message: str, starts_at: datetime | None) -> None:
        super().__init__(ErrorKind.NOT_ACTIVE, None, reason, message)
        self.starts_at = starts_at


class InvalidUserDataError(ValueError):
    """User data that is not a MIME multipart document holding a valid nodeadm NodeConfig."""
