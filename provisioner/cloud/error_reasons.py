"""The reason and the fix users see for each AWS error code: the words of a ``CloudError``.

``describe_code`` answers (reason, fix sentence) for a code and its kind; the reason is a
CamelCase word fit for a condition or an Event, the fix names what a person can do.
Re-exported by ``provisioner.cloud.errors``, whose ``to_cloud_error`` uses it.
"""

from __future__ import annotations

from typing import Final

from provisioner.api import constants as c
from provisioner.cloud.ec2_error_codes import EC2_ERROR_CODES, CodeClass
from provisioner.cloud.error_codes import ErrorKind

__all__ = ["describe_code"]


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
    "InvalidLaunchTemplateName.AlreadyExistsException": (
        "LaunchTemplateExists",
        EC2_ERROR_CODES["InvalidLaunchTemplateName.AlreadyExistsException"].fix,
    ),
    # Not "gone" like the rest of the InvalidLaunchTemplate family: the name or id is refused.
    "InvalidLaunchTemplateId.Malformed": (
        "InvalidRequest",
        EC2_ERROR_CODES["InvalidLaunchTemplateId.Malformed"].fix,
    ),
    "InvalidLaunchTemplateName.MalformedException": (
        "InvalidRequest",
        EC2_ERROR_CODES["InvalidLaunchTemplateName.MalformedException"].fix,
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


def _prefixed(code: str | None) -> bool:
    return code is not None and code.startswith(tuple(p for p, _, _ in _PREFIXED))


def describe_code(code: str | None, kind: ErrorKind) -> tuple[str, str]:
    """The (reason, fix sentence) users see for ``code``."""
    if code in _EXACT:
        return _EXACT[code]
    row = EC2_ERROR_CODES.get(code or "")
    if row is not None and row.cls is CodeClass.ACCOUNT and code not in _ACCESS:
        # The account itself must act (opt in, verify, unblock, a quota): never the pool.
        return "AccountActionRequired", row.fix
    if row is not None and row.cls is CodeClass.CONFIG and not _prefixed(code):
        return "InvalidRequest", row.fix
    for prefix, reason, fix in _PREFIXED:
        if code and code.startswith(prefix):
            return reason, fix
    if code in _ACCESS:
        return (
            "AccessDenied",
            "The controller's IAM identity lacks a permission this call needs; an account "
            "administrator must attach the controller policy (IAM appendix) to its role and "
            "check iam:PassRole for the node role.",
        )
    if kind is ErrorKind.CAPACITY:
        return "InsufficientCapacity", _CAPACITY_FIX
    if kind is ErrorKind.RETRYABLE:
        return "AwsUnavailable", "A transient AWS failure; the call is retried with backoff."
    if kind is ErrorKind.CONFIG:
        return "InvalidRequest", "AWS rejected the request as written; fix the pool's shape."
    if kind is ErrorKind.NOT_FOUND:
        return "NotFound", "The resource no longer exists."
    return (
        "UnknownAwsError",
        "An AWS error this controller does not know; the same request is retried a few times "
        "(unknownErrorAttemptsBeforeRetry), then the Workload's check goes to Retry.",
    )
