"""Every EC2 error code the engine's calls can meet, with its class and the fix users read.

Source: AWS, "Error codes for the Amazon EC2 API" (``SOURCE_URL``), read on ``SOURCE_READ_ON``.
The page's whole list is kept beside this module as data (``ec2_error_codes.tsv``: every code,
its section, and which of RunInstances, CreateFleet, CreateLaunchTemplate, TerminateInstances
and CreateTags can return it). Every code that one of those calls can return has a row here;
the catalogue test reads the list and checks that. A few codes EC2 returns that the page does
not list are kept too, each with where it comes from (``NOT_ON_THE_PAGE``).

This table is read by ``error_codes.classify_code`` (the kind a code is sorted into) and
``error_reasons.describe_code`` (the fix). A code not in it is one the controller has never
seen: ``ErrorKind.UNKNOWN``, retried at most ``unknownErrorAttemptsBeforeRetry`` times before
the Workload's check goes to Retry.

Classes: ``capacity`` (no room or no quota for N now; a later attempt may have it),
``throttle`` (slow down, same token), ``transient`` (AWS-side or eventual consistency; same
token), ``config`` (the request can never succeed as written; the pool or the controller's
setup must change), ``account`` (the AWS account itself must act: opt in, verify, unblock,
grant, raise a quota).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Final, NamedTuple

__all__ = [
    "EC2_ERROR_CODES",
    "NOT_ON_THE_PAGE",
    "PAGE_LIST",
    "SOURCE_READ_ON",
    "SOURCE_URL",
    "CodeClass",
    "Ec2Code",
]

SOURCE_URL: Final = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
SOURCE_READ_ON: Final = "2026-12-05"
# The page's list as data (code, section, actions), beside this module.
PAGE_LIST: Final = Path(__file__).with_name("ec2_error_codes.tsv")


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
_HOST: Final = (
    "The launch asks for a Dedicated Host the engine never uses; remove host tenancy, HostId "
    "and host resource groups from the launch template (the engine launches on default "
    "tenancy)."
)
_PRIVATE_IP: Final = (
    "The launch names a fixed private address, which a gang of N cannot share; remove "
    "PrivateIpAddress from the launch template's interfaces."
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
    "TagPolicyViolation": Ec2Code(
        _ACC,
        "The account's tag policy (AWS Organizations) refuses the tags of this launch; an "
        "administrator must let the controller's tags through the policy, or the pool's tags "
        "must follow it.",
    ),
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
    "InvalidLaunchTemplateId.Malformed": Ec2Code(
        _CFG, "The launch named a malformed launch template id (lt-...). " + _SDK
    ),
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
    "InvalidNetworkInterfaceId.Malformed": Ec2Code(
        _CFG, "A network interface id in the launch template is malformed (eni-...)."
    ),
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
    "MaxTemplateLimitExceeded": Ec2Code(
        _ACC,
        "The account is at its launch template quota; delete unused templates or " + _QUOTA + ".",
    ),
    "MaxTemplateVersionLimitExceeded": Ec2Code(
        _ACC,
        "The pool's launch template is at the account's version quota; delete old versions "
        "of it or " + _QUOTA + ".",
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
    "AccountDisabled": Ec2Code(
        _ACC,
        "AWS has administratively disabled this for the account; the account owner must "
        "contact AWS Support. Nothing in the pool can fix this.",
    ),
    "BootForVolumeTypeUnsupported": Ec2Code(
        _CFG, "The root volume's type cannot boot; use gp3 for the root volume."
    ),
    "ClientInvalidParameterValue": Ec2Code(_CFG, "EC2 refused a parameter's value; " + _SHAPE),
    "ConcurrentTagAccess": Ec2Code(
        _TRN, "Another call is tagging the same resource; the tags are written again."
    ),
    "CustomerKeyHasBeenRevoked": Ec2Code(
        _CFG,
        "The KMS key of the nodes' encrypted volumes cannot be used; restore the key or its "
        "grant to the node role and EC2, or name another key.",
    ),
    "DefaultVpcDoesNotExist": Ec2Code(
        _CFG, "The launch named no subnet and the region has no default VPC; name subnets."
    ),
    "IncompatibleHostRequirements": Ec2Code(_CFG, _HOST),
    "InstanceCreditSpecification.NotSupported": Ec2Code(
        _CFG,
        "The credit specification applies to burstable (T) types only; remove it from the "
        "launch template or choose a T type.",
    ),
    "InsufficientReservedInstancesCapacity": Ec2Code(
        _CAP, "The reservation has no room. " + _RETRY
    ),
    "InvalidAffinity": Ec2Code(_CFG, _HOST),
    "InvalidAvailabilityZone": Ec2Code(_CFG, "Name availability zones of this region."),
    "InvalidCapacityReservationState.PendingActivation": Ec2Code(
        _TRN, "The Capacity Block has not started yet; the launch is made again once it has."
    ),
    "InvalidClientToken": Ec2Code(_CFG, "EC2 refused the launch's ClientToken. " + _SDK),
    "InvalidCpuCredits": Ec2Code(
        _CFG, "The credit option must be standard or unlimited; fix the launch template."
    ),
    "InvalidCpuCredits.Malformed": Ec2Code(
        _CFG, "The credit option must be standard or unlimited; fix the launch template."
    ),
    "InvalidHostId": Ec2Code(_CFG, _HOST),
    "InvalidHostID.Malformed": Ec2Code(_CFG, _HOST),
    "InvalidHostId.Malformed": Ec2Code(_CFG, _HOST),
    "InvalidHostID.NotFound": Ec2Code(_CFG, _HOST),
    "InvalidHostId.NotFound": Ec2Code(_CFG, _HOST),
    "InvalidIamInstanceProfileArn.Malformed": Ec2Code(
        _CFG, "The node instance profile's ARN is malformed; fix the node role settings."
    ),
    "InvalidInstanceState": Ec2Code(
        _TRN, "The instance is between states; the call is made again once it settles."
    ),
    "InvalidIPAddress.InUse": Ec2Code(_CFG, _PRIVATE_IP),
    "InvalidKernelId.Malformed": Ec2Code(
        _CFG, "The launch names a kernel (aki-...); remove KernelId from the launch template."
    ),
    "InvalidLaunchTargets": Ec2Code(
        _CFG,
        "The capacity reservation the launch targets is refused; name an active reservation "
        "(cr-...) of the gang's type and zone.",
    ),
    "InvalidManifest": Ec2Code(_CFG, "The AMI cannot be read; name another AMI."),
    "InvalidNetworkInterface.NotFound": Ec2Code(
        _CFG,
        "A network interface the launch names does not exist; remove NetworkInterfaceId from "
        "the launch template.",
    ),
    "InvalidPlacementGroupId.Malformed": Ec2Code(
        _CFG, "A placement group id is malformed (pg-...); fix the launch template."
    ),
    "InvalidRamDiskId.Malformed": Ec2Code(
        _CFG, "The launch names a RAM disk (ari-...); remove RamDiskId from the launch template."
    ),
    "InvalidRequest": Ec2Code(_CFG, "EC2 refused the request (the message says why); " + _SHAPE),
    "InvalidResourceType.Unknown": Ec2Code(
        _CFG, "A tag specification names a resource type EC2 refuses. " + _SDK
    ),
    "InvalidSecurity.RequestHasExpired": Ec2Code(
        _TRN,
        "The controller's clock is more than 5 minutes off; the call is signed again (fix the "
        "host's time sync if it persists).",
    ),
    "InvalidSnapshot.NotFound": Ec2Code(
        _CFG, "A block device mapping names a snapshot that does not exist in this region."
    ),
    "InvalidSnapshotID.Malformed": Ec2Code(
        _CFG, "A block device mapping's snapshot id is malformed (snap-...)."
    ),
    "InvalidSecurityGroupId.Malformed": Ec2Code(
        _CFG, "A security group id is malformed (sg-...); fix the pool's security groups."
    ),
    "InvalidSubnet": Ec2Code(_CFG, "Name subnets that exist in the cluster's VPC."),
    "InvalidSubnetId.NotFound": Ec2Code(_CFG, "Name subnets that exist in the cluster's VPC."),
    "InvalidTenancy": Ec2Code(_CFG, _HOST),
    "NoSuchVersion": Ec2Code(_CFG, "EC2 does not know the API version asked. " + _SDK),
    "OperationNotPermitted": Ec2Code(
        _CFG,
        "EC2 refused to terminate: the instance has termination protection; remove "
        "DisableApiTermination from the launch template and turn it off on the instance.",
    ),
    "Resource.AlreadyAssigned": Ec2Code(_CFG, _PRIVATE_IP),
    "ResourceCountExceeded": Ec2Code(
        _CFG,
        "The gang asks for more instances than EC2 takes in one request; lower the gang's count "
        "(all N are launched in one request).",
    ),
    "ResourceLimitExceeded": Ec2Code(
        _CAP, "An EC2 resource quota is reached (the message names it); " + _QUOTA + "."
    ),
    "RetryableError": Ec2Code(
        _TRN, "A call AWS made for this launch did not complete; retried with backoff."
    ),
    "SecurityGroupLimitExceeded": Ec2Code(
        _CFG, "The nodes get more security groups than EC2 allows; pass fewer security groups."
    ),
    "SecurityGroupsPerInstanceLimitExceeded": Ec2Code(
        _CFG, "The nodes get more security groups than EC2 allows; pass fewer security groups."
    ),
    "SecurityGroupsPerInterfaceLimitExceeded": Ec2Code(
        _CFG, "An interface gets more security groups than EC2 allows; pass fewer."
    ),
    "SignatureDoesNotMatch": Ec2Code(_ACC, _CREDS),
    "UnavailableHostRequirements": Ec2Code(_CFG, _HOST),
    "UnknownVolumeType": Ec2Code(
        _CFG, "A block device mapping names a volume type EC2 does not know; use gp3."
    ),
    "UnsupportedException": Ec2Code(
        _CFG,
        "Capacity Reservations are not offered in this region; remove "
        "capacity-reservation-id from the pool.",
    ),
    "UnsupportedHibernationConfiguration": Ec2Code(
        _CFG, "The launch asks for hibernation, which the engine never uses; remove it."
    ),
    "UnsupportedInstanceTypeOnHost": Ec2Code(_CFG, _HOST),
    "VolumeIOPSLimit": Ec2Code(
        _CFG, "A volume asks for more IOPS than its type allows; lower Iops in the template."
    ),
    "VolumeTypeNotAvailableInZone": Ec2Code(
        _CAP, "The volume type is not offered in this zone; the next zone is tried."
    ),
    "VPCIdNotSpecified": Ec2Code(
        _CFG, "The launch named no subnet and the region has no default VPC; name subnets."
    ),
    "VPCResourceNotSpecified": Ec2Code(
        _CFG, "The instance type runs only in a VPC; name the cluster's subnets."
    ),
    "ZonesMismatched": Ec2Code(_CFG, _HOST),
    # --- server codes ----------------------------------------------------------------------
    "BandwidthLimitExceeded": Ec2Code(_THR, "A bandwidth limit was met; retried with backoff."),
    "InsufficientVolumeCapacity": Ec2Code(_CAP, "EBS has no room for the volumes. " + _RETRY),
    "ServerInternal": Ec2Code(_TRN, "An AWS-side failure; retried with backoff."),
    "InternalError": Ec2Code(_TRN, "An AWS-side failure; retried with backoff."),
    "InternalFailure": Ec2Code(_TRN, "An AWS-side failure; retried with backoff."),
    "ServiceUnavailable": Ec2Code(_TRN, "EC2 is unavailable; retried with backoff."),
    "Unavailable": Ec2Code(_TRN, "EC2 is unavailable; retried with backoff."),
}

# Codes with a row that the page does not list, and where each comes from. The page's list
# is the reference; a row outside it must say why it exists.
NOT_ON_THE_PAGE: Final[dict[str, str]] = {
    "EbsOptimizedNotSupported": "answered by RunInstances for a type that is not EBS-optimizable",
    "InvalidFleetConfig": "CreateFleet's Errors: two overrides name one instance pool",
    "InvalidInstanceCreditSpecification.NotSupported": "met on a launch (issue 41)",
    "InvalidUserData.Malformed": "answered by RunInstances for user data that is not base64",
    "MaxFleetCountExceeded": "CreateFleet: the account's fleet quota",
}
