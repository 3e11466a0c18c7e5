"""Every CreateFleet and RunInstances error code a launch can meet, as the pool acts on it.

One row per code from EC2's "Error codes for the Amazon EC2 API" page that a launch can
answer (and the CreateFleet codes users report, such as InvalidFleetConfig): the kind the
pool acts on, the reason users see, and a phrase of the fix the message must name. A code
that falls to UNKNOWN is retried with the same token forever, so the table is the place
to add the next one.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.cloud.errors import ErrorKind, classify_code, is_quota, to_cloud_error

pytestmark = pytest.mark.unit

CAPACITY, CONFIG, RETRY = ErrorKind.CAPACITY, ErrorKind.CONFIG, ErrorKind.RETRYABLE

CATALOGUE = [
    # code, kind, reason, a phrase of the fix
    ("InsufficientInstanceCapacity", CAPACITY, "InsufficientCapacity", "retried whole"),
    ("InsufficientHostCapacity", CAPACITY, "InsufficientCapacity", "retried whole"),
    ("InsufficientReservedInstanceCapacity", CAPACITY, "InsufficientCapacity", "retried whole"),
    ("InsufficientCapacity", CAPACITY, "InsufficientCapacity", "retried whole"),
    ("UnfulfillableCapacity", CAPACITY, "InsufficientCapacity", "retried whole"),
    ("InsufficientCapacityOnHost", CAPACITY, "InsufficientCapacity", "default tenancy"),
    ("ReservationCapacityExceeded", CAPACITY, "ReservationFull", c.ANN_CAPACITY_RESERVATION_ID),
    ("InsufficientFreeAddressesInSubnet", CAPACITY, "SubnetFull", "most free addresses"),
    ("Unsupported", CAPACITY, "InstanceTypeNotOffered", c.ANN_AVAILABILITY_ZONES),
    ("InstanceLimitExceeded", CAPACITY, "QuotaExceeded", "Service Quotas"),
    ("VcpuLimitExceeded", CAPACITY, "QuotaExceeded", "Service Quotas"),
    ("MaxFleetCountExceeded", CAPACITY, "QuotaExceeded", "delete-fleets"),
    ("VolumeLimitExceeded", CAPACITY, "QuotaExceeded", "Service Quotas"),
    ("MaxIOPSLimitExceeded", CAPACITY, "QuotaExceeded", "Service Quotas"),
    ("NetworkInterfaceLimitExceeded", CAPACITY, "QuotaExceeded", "Service Quotas"),
    ("InvalidFleetConfig", CONFIG, "InvalidFleetConfig", "one subnet per zone"),
    ("IdempotentParameterMismatch", CONFIG, "ClientTokenReused", "fresh token"),
    ("InvalidParameterValue", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("InvalidParameterCombination", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("MissingParameter", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("UnknownParameter", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("InvalidInstanceType", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("InvalidBlockDeviceMapping", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("InvalidUserData.Malformed", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("UnsupportedOperation", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("EbsOptimizedNotSupported", CONFIG, "InvalidRequest", "another instance type"),
    ("InvalidInterface.IpAddressLimitExceeded", CONFIG, "InvalidNetworkInterfaces", "type"),
    ("TagLimitExceeded", CONFIG, "InvalidTags", "50 tags"),
    ("InvalidTagKey.Malformed", CONFIG, "InvalidTags", "aws:"),
    ("OptInRequired", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("PendingVerification", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("Blocked", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("UnauthorizedOperation", CONFIG, "AccessDenied", "controller policy"),
    ("AuthFailure", CONFIG, "AccessDenied", "controller policy"),
    ("InvalidAMIID.NotFound", CONFIG, "InvalidAMI", c.ANN_AMI_ID),
    ("InvalidAMIID.Malformed", CONFIG, "InvalidAMI", c.ANN_AMI_ID),
    ("InvalidAMIID.Unavailable", CONFIG, "InvalidAMI", c.ANN_AMI_ID),
    ("InvalidSubnetID.NotFound", CONFIG, "InvalidSubnet", c.ANN_SUBNETS),
    ("InvalidSubnet.Conflict", CONFIG, "InvalidSubnet", c.ANN_SUBNETS),
    ("InvalidIamInstanceProfile.NotFound", CONFIG, "InstanceProfileNotFound", "node role"),
    ("InvalidCapacityReservationId.NotFound", CONFIG, "InvalidCapacityReservation", "cr-"),
    ("InvalidCapacityReservationId.Malformed", CONFIG, "InvalidCapacityReservation", "cr-"),
    ("InvalidLaunchTemplateId.NotFound", CONFIG, "LaunchTemplateNotFound", "launch template"),
    ("InvalidLaunchTemplateName.NotFoundException", CONFIG, "LaunchTemplateNotFound", "stack"),
    ("InvalidGroup.NotFound", CONFIG, "InvalidSecurityGroup", "security group"),
    ("InvalidSecurityGroupID.NotFound", CONFIG, "InvalidSecurityGroup", "security group"),
    ("InvalidPlacementGroup.Unknown", CONFIG, "InvalidPlacementGroup", "placement group"),
    ("InvalidKeyPair.NotFound", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("RequestLimitExceeded", RETRY, "AwsUnavailable", "retried"),
    ("InternalError", RETRY, "AwsUnavailable", "retried"),
    ("ServiceUnavailable", RETRY, "AwsUnavailable", "retried"),
    ("Unavailable", RETRY, "AwsUnavailable", "retried"),
]

# Regional quotas: the next subnet or zone would answer the same, so a sweep stops at once.
QUOTAS = {
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxFleetCountExceeded",
    "VolumeLimitExceeded",
    "MaxIOPSLimitExceeded",
    "NetworkInterfaceLimitExceeded",
}


@pytest.mark.parametrize(
    ("code", "kind", "reason", "fix"), CATALOGUE, ids=[r[0] for r in CATALOGUE]
)
@pytest.mark.parametrize("action", ["RunInstances", "CreateFleet"])
def test_each_launch_code_has_a_kind_a_reason_and_a_fix(
    code: str, kind: ErrorKind, reason: str, fix: str, action: str
) -> None:
    exc = ClientError({"Error": {"Code": code, "Message": "EC2 says so"}}, action)
    err = to_cloud_error(exc, f"{action} of 4 x p5.48xlarge")
    assert classify_code(code) is kind
    assert (err.kind, err.code, err.reason) == (kind, code, reason)
    assert fix in err.message and "EC2 says so" in err.message
    assert is_quota(code) == (code in QUOTAS)
