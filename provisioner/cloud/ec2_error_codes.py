"""Every EC2 error code the engine's calls can meet, with its class and the fix users read.

Source: AWS, "Error codes for the Amazon EC2 API"
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html), read on
2026-12-05: its common client codes, the client codes that RunInstances, CreateFleet,
CreateLaunchTemplate, TerminateInstances and CreateTags can return, and its server codes.
A few codes EC2 returns that the page does not list (``UnfulfillableCapacity``,
``InvalidFleetConfig`` in CreateFleet's ``Errors``, throttling aliases) are kept here too.

This table is data, read by ``error_codes.classify_code`` (the kind a code is sorted into)
and ``error_reasons.describe_code`` (the fix), and by the catalogue test, which checks every
row. A code not in it is one the controller has never seen: ``ErrorKind.UNKNOWN``, retried
at most ``unknownErrorAttemptsBeforeRetry`` times before the Workload's check goes to Retry.

Classes: ``capacity`` (no room or no quota for N now; a later attempt may have it),
``throttle`` (slow down, same token), ``transient`` (AWS-side or eventual consistency; same
token), ``config`` (the request can never succeed as written; the pool or the controller's
setup must change), ``account`` (the AWS account itself must act: opt in, verify, unblock,
grant, raise a quota).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NamedTuple

__all__ = ["EC2_ERROR_CODES", "SOURCE_READ_ON", "SOURCE_URL", "CodeClass", "Ec2Code"]

SOURCE_URL: Final = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
SOURCE_READ_ON: Final = "2026-12-05"


class CodeClass(StrEnum):
    CAPACITY = "capacity"
    THROTTLE = "throttle"
    CONFIG = "config"
    ACCOUNT = "account"
    TRANSIENT = "transient"


class Ec2Code(NamedTuple):
    cls: CodeClass
    fix: str


_CAP, _THR, _CFG, _ACC, _TRN = (
    CodeClass.CAPACITY,
    CodeClass.THROTTLE,
    CodeClass.CONFIG,
    CodeClass.ACCOUNT,
    CodeClass.TRANSIENT,
)
_RETRY: Final = "Nothing is running; the gang is retried whole at $0."
_QUOTA: Final = "request a Service Quotas increase in this region"
_SHAPE: Final = "fix the pool's shape (the message names the parameter)."
_SDK: Final = (
    "The request did not reach EC2 as the SDK should send it; upgrade the controller image "
    "and report it if it persists."
)
_CREDS: Final = (
    "The controller's AWS credentials are not valid for this account; check its Pod "
    "Identity or IRSA role and the region."
)

EC2_ERROR_CODES: Final[dict[str, Ec2Code]] = {
    # --- common client codes (every action) ------------------------------------------------
    "AuthFailure": Ec2Code(_ACC, _CREDS),
    "Blocked": Ec2Code(
        _ACC,
        "The AWS account is blocked; the account owner must contact AWS Support to unblock "
        "it. Nothing in the pool can fix this.",
    ),
    "DryRunOperation": Ec2Code(
        _CFG, "A DryRun call would have succeeded; nothing to fix (only `doctor` asks)."
    ),
    "IdempotentParameterMismatch": Ec2Code(
        _CFG,
        "A launch with this ClientToken was made with other parameters; the controller moves "
        "the acquire generation and launches with a fresh token.",
    ),
    "IncompleteSignature": Ec2Code(_CFG, _SDK),
    "InvalidAction": Ec2Code(_CFG, _SDK),
    "InvalidCharacter": Ec2Code(_CFG, "A value holds a character EC2 refuses; " + _SHAPE),
    "InvalidClientTokenId": Ec2Code(_ACC, _CREDS),
    "InvalidPaginationToken": Ec2Code(_TRN, "The page token expired; the call is made again."),
    "InvalidParameter": Ec2Code(_CFG, "EC2 refused a parameter; " + _SHAPE),
    "InvalidParameterCombination": Ec2Code(
        _CFG, "Two parameters of the launch cannot go together; " + _SHAPE
    ),
    "InvalidParameterDependency": Ec2Code(
        _CFG, "A parameter needs another one the launch does not give; " + _SHAPE
    ),
    "InvalidParameterValue": Ec2Code(_CFG, "EC2 refused a parameter's value; " + _SHAPE),
    "InvalidQueryParameter": Ec2Code(_CFG, _SDK),
    "MalformedQueryString": Ec2Code(_CFG, _SDK),
    "MissingAction": Ec2Code(_CFG, _SDK),
    "MissingAuthenticationToken": Ec2Code(_ACC, _CREDS),
    "MissingParameter": Ec2Code(_CFG, "A required parameter is missing; " + _SHAPE),
    "OptInRequired": Ec2Code(
        _ACC,
        "The account must opt in to the service or Region this launch uses (an opt-in Region, "
        "a Local Zone, or the offer in the message); the account owner must enable it, or a "
        "new account must finish activation. Nothing in the pool can fix this.",
    ),
    "PendingVerification": Ec2Code(
        _ACC,
        "The AWS account is pending verification; the account owner must finish it (AWS "
        "Support can help). Launches are refused until then.",
    ),
    "RequestExpired": Ec2Code(_TRN, "The request's signature expired; it is signed again."),
    "RequestLimitExceeded": Ec2Code(_THR, "EC2 throttled the account; retried with backoff."),
    "UnauthorizedOperation": Ec2Code(
        _ACC,
        "The controller's IAM identity lacks a permission this call needs; an account "
        "administrator must attach the controller policy (IAM appendix) to its role.",
    ),
    "UnknownParameter": Ec2Code(_CFG, _SDK),
    "UnsupportedInstanceAttribute": Ec2Code(_CFG, "The instance type lacks it; " + _SHAPE),
    "UnsupportedOperation": Ec2Code(
        _CFG, "The instance type or zone does not support what is asked; " + _SHAPE
    ),
    "UnsupportedProtocol": Ec2Code(_CFG, _SDK),
    "ValidationError": Ec2Code(_CFG, "EC2 refused the input; " + _SHAPE),
    # --- client codes of RunInstances, CreateFleet, CreateLaunchTemplate, Terminate, Tags --
    "AddressLimitExceeded": Ec2Code(
        _ACC,
        "The account is at its Elastic IP quota; release unused addresses or " + _QUOTA + ".",
    ),
    "AttachmentLimitExceeded": Ec2Code(
        _CFG, "The launch attaches more volumes or interfaces than the type allows; " + _SHAPE
    ),
    "EbsOptimizedNotSupported": Ec2Code(_CFG, "The type is not EBS-optimizable; " + _SHAPE),
    "EncryptedVolumesNotSupported": Ec2Code(
        _CFG, "The instance type cannot use encrypted volumes; choose another type."
    ),
    "IdempotentInstanceTerminated": Ec2Code(
        _CFG,
        "The launch with this ClientToken made instances that are terminated; the controller "
        "moves the acquire generation and launches with a fresh token.",
    ),
    "IncorrectInstanceState": Ec2Code(
        _TRN, "The instance is between states; the call is made again once it settles."
    ),
    "IncorrectState": Ec2Code(_TRN, "The resource is between states; the call is made again."),
    "InstanceLimitExceeded": Ec2Code(_CAP, "The instance quota is reached; " + _QUOTA + "."),
    "InsufficientAddressCapacity": Ec2Code(_CAP, "EC2 has no addresses to give. " + _RETRY),
    "InsufficientCapacity": Ec2Code(_CAP, "EC2 has no room for the gang. " + _RETRY),
    "InsufficientCapacityOnHost": Ec2Code(_CAP, "The Dedicated Host is full. " + _RETRY),
    "InsufficientFreeAddressesInSubnet": Ec2Code(
        _CAP, "The subnet has too few free addresses; add subnets. " + _RETRY
    ),
    "InsufficientHostCapacity": Ec2Code(_CAP, "No Dedicated Host capacity. " + _RETRY),
    "InsufficientInstanceCapacity": Ec2Code(
        _CAP, "EC2 has no room for N now; reserve capacity for large gangs. " + _RETRY
    ),
    "InsufficientReservedInstanceCapacity": Ec2Code(_CAP, "The reservation has no room. " + _RETRY),
    "InvalidAMIID.Malformed": Ec2Code(_CFG, "Fix the AMI id the pool names."),
    "InvalidAMIID.NotFound": Ec2Code(_CFG, "Name an AMI that exists in this region."),
    "InvalidAMIID.Unavailable": Ec2Code(_CFG, "The AMI is deregistered or failed; name another."),
    "InvalidBlockDeviceMapping": Ec2Code(_CFG, "A block device mapping is refused; " + _SHAPE),
    "InvalidCapacityReservationId.Malformed": Ec2Code(_CFG, "Fix the reservation id (cr-...)."),
    "InvalidCapacityReservationId.NotFound": Ec2Code(
        _CFG, "Name an active capacity reservation in this region."
    ),
    "InvalidFleetConfig": Ec2Code(
        _CFG, "Two fleet overrides name one instance pool; fix the pool's subnets or mode."
    ),
    "InvalidGroup.NotFound": Ec2Code(_CFG, "Pass security groups that exist in the VPC."),
    "InvalidGroupId.Malformed": Ec2Code(
        _CFG, "A security group id is malformed (sg-...); fix the pool's security groups."
    ),
    "InvalidID": Ec2Code(_CFG, "A resource id is malformed; " + _SHAPE),
    "InvalidInstanceCreditSpecification.NotSupported": Ec2Code(
        _CFG,
        "The credit specification applies to burstable (T) types only; remove it from the "
        "launch template or choose a T type.",
    ),
    "InvalidInstanceID.Malformed": Ec2Code(_CFG, "An instance id is malformed (i-...)."),
    "InvalidInstanceID.NotFound": Ec2Code(
        _TRN, "EC2 does not show the instance yet, or it is gone; the call is made again."
    ),
    "InvalidInstanceType": Ec2Code(_CFG, "Name an instance type EC2 offers in this region."),
    "InvalidInterface.IpAddressLimitExceeded": Ec2Code(
        _CFG, "An interface asks for more addresses than the type allows; " + _SHAPE
    ),
    "InvalidKeyPair.NotFound": Ec2Code(_CFG, "Name a key pair that exists in this region."),
    "InvalidLaunchTemplateId.Malformed": Ec2Code(_CFG, "The launch template id is malformed."),
    "InvalidLaunchTemplateId.NotFound": Ec2Code(
        _CFG, "The pool's launch template is gone; the stack's prepare makes it again."
    ),
    "InvalidLaunchTemplateId.VersionNotFound": Ec2Code(
        _CFG, "The template version is gone; the stack's prepare makes it again."
    ),
    "InvalidLaunchTemplateName.AlreadyExistsException": Ec2Code(
        _CFG,
        "A launch template with the pool's name exists outside its stack; delete it or "
        "import it into the pool's stack.",
    ),
    "InvalidLaunchTemplateName.MalformedException": Ec2Code(
        _CFG, "The launch template name is refused; shorten the pool's name."
    ),
    "InvalidLaunchTemplateName.NotFoundException": Ec2Code(
        _CFG, "The pool's launch template is gone; the stack's prepare makes it again."
    ),
    "InvalidNetworkInterface.InUse": Ec2Code(
        _CFG,
        "A network interface the launch names is attached elsewhere; let EC2 create the "
        "interfaces (remove NetworkInterfaceId from the launch template).",
    ),
    "InvalidNetworkInterfaceID.Malformed": Ec2Code(_CFG, "An interface id is malformed."),
    "InvalidNetworkInterfaceID.NotFound": Ec2Code(
        _TRN, "EC2 does not show the interface yet, or it is gone; retried."
    ),
    "InvalidPlacementGroup.InUse": Ec2Code(
        _CAP, "The cluster placement group holds instances in another zone. " + _RETRY
    ),
    "InvalidPlacementGroup.Unknown": Ec2Code(
        _CFG, "The pool's placement group is gone; the stack's prepare makes it again."
    ),
    "InvalidSecurityGroupID.NotFound": Ec2Code(
        _CFG, "Pass security groups that exist in the cluster's VPC."
    ),
    "InvalidSubnetID.Malformed": Ec2Code(_CFG, "A subnet id is malformed (subnet-...)."),
    "InvalidSubnetID.NotFound": Ec2Code(_CFG, "Name subnets that exist in the cluster's VPC."),
    "InvalidTagKey.Malformed": Ec2Code(_CFG, "A tag key is refused; fix the pool's tags."),
    "InvalidUserData.Malformed": Ec2Code(_CFG, "The user data is refused; fix the node config."),
    "InvalidZone.NotFound": Ec2Code(_CFG, "Name availability zones of this region."),
    "LaunchTemplateLimitExceeded": Ec2Code(
        _ACC, "The account is at its launch template quota; delete unused ones or " + _QUOTA
    ),
    "MaxFleetCountExceeded": Ec2Code(_CAP, "The fleet quota is reached; " + _QUOTA + "."),
    "MaxIOPSLimitExceeded": Ec2Code(_CAP, "The EBS IOPS quota is reached; " + _QUOTA + "."),
    "MaxSpotInstanceCountExceeded": Ec2Code(
        _CFG,
        "The launch asked for Spot, which the engine never does; remove InstanceMarketOptions "
        "from the launch template.",
    ),
    "NetworkInterfaceLimitExceeded": Ec2Code(
        _CAP, "The network-interface quota is reached; " + _QUOTA + "."
    ),
    "PrivateIpAddressLimitExceeded": Ec2Code(
        _CFG, "An interface asks for more private addresses than the type allows; " + _SHAPE
    ),
    "ReservationCapacityExceeded": Ec2Code(
        _CAP, "The capacity reservation has too few free slots. " + _RETRY
    ),
    "TagLimitExceeded": Ec2Code(_CFG, "More than 50 tags; remove tags from the pool."),
    "UnfulfillableCapacity": Ec2Code(_CAP, "EC2 has no room for the fleet. " + _RETRY),
    "Unsupported": Ec2Code(
        _CAP, "The instance type is not offered in this zone; the next zone is tried."
    ),
    "VcpuLimitExceeded": Ec2Code(_CAP, "The vCPU quota is too low; " + _QUOTA + "."),
    "VolumeLimitExceeded": Ec2Code(_CAP, "The EBS storage quota is reached; " + _QUOTA + "."),
    # --- server codes ----------------------------------------------------------------------
    "InternalError": Ec2Code(_TRN, "An AWS-side failure; retried with backoff."),
    "InternalFailure": Ec2Code(_TRN, "An AWS-side failure; retried with backoff."),
    "ServiceUnavailable": Ec2Code(_TRN, "EC2 is unavailable; retried with backoff."),
    "Unavailable": Ec2Code(_TRN, "EC2 is unavailable; retried with backoff."),
}
