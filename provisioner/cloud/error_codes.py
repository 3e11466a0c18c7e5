"""The AWS error codes the EC2 engine knows, and the kind each one is sorted into.

The catalogue behind ``errors.classify``: sets of codes per kind and ``classify_code``, which
reads nothing but a code (and an HTTP status). Re-exported by ``provisioner.cloud.errors``,
where callers find them.

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

Every code in AWS's error-code list that the engine's calls can meet has a row in
``ec2_error_codes`` (its class and fix); a code these sets do not name is sorted by that row
(``capacity`` CAPACITY, ``throttle``/``transient`` RETRYABLE, ``config``/``account`` CONFIG). A
code in neither is UNKNOWN: retried at most ``unknownErrorAttemptsBeforeRetry`` times, then
the Workload's check goes to Retry naming it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from provisioner.cloud.ec2_error_codes import EC2_ERROR_CODES, CodeClass

__all__ = [
    "CAPACITY_CODES",
    "CONFIG_CODES",
    "CONFIG_PREFIXES",
    "NOT_FOUND_CODES",
    "PLACEMENT_ZONE_CODES",
    "QUOTA_CODES",
    "RETRYABLE_CODES",
    "STACK_RESOURCE_GONE_CODES",
    "UNOFFERED_CODES",
    "ErrorKind",
    "classify_code",
    "is_quota",
    "is_unoffered",
]


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
        "InsufficientAddressCapacity",
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

# The throttles among the retryable codes: the caller is going too fast (the rest are AWS's
# own failures), so the account's launch budget shrinks on them.
THROTTLE_CODES: Final = frozenset(
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
    }
)


# Retried with the same request: the throttles, and AWS's own failures.
RETRYABLE_CODES: Final = THROTTLE_CODES | frozenset(
    {
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
    row = EC2_ERROR_CODES.get(code)
    if row is not None:
        return _KIND_OF_CLASS[row.cls]
    if http_status is not None and http_status >= 500:
        return ErrorKind.RETRYABLE
    return ErrorKind.UNKNOWN


# What each class of ``ec2_error_codes`` means for the engine. An account's state (opt-in,
# verification, a block, a grant) is CONFIG: no wait fixes it, a person must act.
_KIND_OF_CLASS: Final = {
    CodeClass.CAPACITY: ErrorKind.CAPACITY,
    CodeClass.THROTTLE: ErrorKind.RETRYABLE,
    CodeClass.TRANSIENT: ErrorKind.RETRYABLE,
    CodeClass.CONFIG: ErrorKind.CONFIG,
    CodeClass.ACCOUNT: ErrorKind.CONFIG,
}


def is_throttle(code: str | None) -> bool:
    if code is None:
        return False
    row = EC2_ERROR_CODES.get(code)
    return code in THROTTLE_CODES or (row is not None and row.cls is CodeClass.THROTTLE)


def is_quota(code: str | None) -> bool:
    return code in QUOTA_CODES


def is_unoffered(code: str | None) -> bool:
    return code in UNOFFERED_CODES
