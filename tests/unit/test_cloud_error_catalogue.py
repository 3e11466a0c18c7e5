"""Every EC2 error code the engine's calls can meet, as the pool acts on it.

The list is AWS's own: ``provisioner/cloud/ec2_error_codes.tsv`` holds every code of EC2's
"Error codes for the Amazon EC2 API" page, with the page's address and the date it was read,
and which of the controller's calls can return each. The tests below read that file: every
code a call of ours can return has a row of the catalogue (``ec2_error_codes``) with a class,
the kind that class means, and a non-empty fix in the message users read; every row is on the
page or says where else it comes from. The hand-written table below adds the exact reason and
a phrase of the fix for the codes whose words matter most. A code in no row falls to UNKNOWN:
retried at most ``unknownErrorAttemptsBeforeRetry`` times, then the Workload's check goes to
Retry.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.cloud.ec2_error_codes import (
    EC2_ERROR_CODES,
    NOT_ON_THE_PAGE,
    PAGE_LIST,
    SOURCE_READ_ON,
    SOURCE_URL,
    CodeClass,
)
from provisioner.cloud.errors import (
    ErrorKind,
    classify_code,
    describe_code,
    is_quota,
    to_cloud_error,
)

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
    ("UnknownParameter", CONFIG, "InvalidRequest", "upgrade the controller image"),
    ("InvalidInstanceType", CONFIG, "InvalidRequest", "instance type EC2 offers"),
    ("InvalidBlockDeviceMapping", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("InvalidUserData.Malformed", CONFIG, "InvalidRequest", "node config"),
    ("UnsupportedOperation", CONFIG, "InvalidRequest", "fix the pool's shape"),
    ("EbsOptimizedNotSupported", CONFIG, "InvalidRequest", "another instance type"),
    ("InvalidInterface.IpAddressLimitExceeded", CONFIG, "InvalidNetworkInterfaces", "type"),
    ("TagLimitExceeded", CONFIG, "InvalidTags", "50 tags"),
    ("InvalidTagKey.Malformed", CONFIG, "InvalidTags", "aws:"),
    ("OptInRequired", CONFIG, "AccountActionRequired", "account must opt in"),
    ("PendingVerification", CONFIG, "AccountActionRequired", "account"),
    ("Blocked", CONFIG, "AccountActionRequired", "account"),
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
    ("InvalidKeyPair.NotFound", CONFIG, "InvalidRequest", "key pair that exists"),
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


# What each class of the data means for the engine: NOT_FOUND is a transient answer too (an
# instance not yet visible after its launch, one already gone at a release).
KINDS_OF_CLASS = {
    CodeClass.CAPACITY: {ErrorKind.CAPACITY},
    CodeClass.THROTTLE: {ErrorKind.RETRYABLE},
    CodeClass.TRANSIENT: {ErrorKind.RETRYABLE, ErrorKind.NOT_FOUND},
    CodeClass.CONFIG: {ErrorKind.CONFIG},
    CodeClass.ACCOUNT: {ErrorKind.CONFIG},
}


SECTIONS = {"common", "specific", "server"}
OUR_CALLS = {"Run", "Fleet", "Template", "Terminate", "Tags"}


def _page() -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The page list's header fields (``# key: value``) and its rows."""
    header: dict[str, str] = {}
    rows: list[tuple[str, str, str]] = []
    for line in PAGE_LIST.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip() in ("source", "read"):
                header[key.strip()] = value.strip()
        elif line.strip():
            code, section, actions = line.split("\t")
            rows.append((code, section, actions))
    return header, rows


HEADER, PAGE_ROWS = _page()
PAGE_CODES = {code for code, _, _ in PAGE_ROWS}
# Every code of the page that RunInstances, CreateFleet, CreateLaunchTemplate,
# TerminateInstances or CreateTags can return: all of the common and server codes, and the
# specific ones the list marks.
OURS = sorted(code for code, _, actions in PAGE_ROWS if actions != "-")


def test_the_list_and_the_catalogue_name_one_source() -> None:
    assert HEADER == {"source": SOURCE_URL, "read": SOURCE_READ_ON}
    assert SOURCE_URL.startswith("https://docs.aws.amazon.com/") and "errors-overview" in SOURCE_URL
    assert len(SOURCE_READ_ON) == 10 and SOURCE_READ_ON.startswith("20")


def test_the_list_is_well_formed() -> None:
    codes = [code for code, _, _ in PAGE_ROWS]
    assert len(codes) == len(set(codes)), "a code listed twice"
    assert len(PAGE_ROWS) > 400, "the page lists over 400 codes; the file holds all of them"
    for code, section, actions in PAGE_ROWS:
        assert section in SECTIONS, code
        if section != "specific":
            assert actions == "*", f"{code}: the page says every action can return it"
        elif actions != "-":
            assert set(actions.split(",")) <= OUR_CALLS, code


@pytest.mark.parametrize("code", OURS)
def test_every_code_our_calls_can_meet_has_a_class_a_kind_and_a_fix(code: str) -> None:
    row = EC2_ERROR_CODES.get(code)
    assert row is not None, f"{code} is on AWS's list for our calls but has no row"
    assert isinstance(row.cls, CodeClass)
    assert row.fix.strip()
    kind = classify_code(code)
    assert kind in KINDS_OF_CLASS[row.cls]
    reason, fix = describe_code(code, kind)
    assert reason and fix.strip()
    if row.cls is CodeClass.ACCOUNT:
        # The account must act; the pool's shape has nothing to do with it.
        assert "account" in fix.lower() and "pool's shape" not in fix


@pytest.mark.parametrize("code", sorted(EC2_ERROR_CODES))
def test_every_row_is_on_the_page_or_says_where_it_comes_from(code: str) -> None:
    if code in PAGE_CODES:
        assert code in OURS, f"{code} has a row but the list says none of our calls returns it"
        assert code not in NOT_ON_THE_PAGE
    else:
        assert NOT_ON_THE_PAGE.get(code, "").strip(), f"{code} is on no list"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("OptInRequired", "account must opt in"),
        ("PendingVerification", "account is pending verification"),
        ("Blocked", "contact aws support"),
    ],
)
def test_account_states_say_the_account_must_act(code: str, words: str) -> None:
    exc = ClientError({"Error": {"Code": code, "Message": "EC2 says so"}}, "RunInstances")
    err = to_cloud_error(exc, "RunInstances of 4 x p5.48xlarge")
    assert EC2_ERROR_CODES[code].cls is CodeClass.ACCOUNT
    assert err.reason == "AccountActionRequired" and words in err.message.lower()
    assert "pool's shape" not in err.message


@pytest.mark.parametrize(
    "code",
    [
        "AddressLimitExceeded",
        "InvalidParameterDependency",
        "InvalidGroupId.Malformed",
        "InvalidNetworkInterface.InUse",
        "InvalidInstanceCreditSpecification.NotSupported",
    ],
)
def test_the_codes_met_unknown_before_are_listed(code: str) -> None:
    assert code in EC2_ERROR_CODES
    assert classify_code(code) is not ErrorKind.UNKNOWN
    assert describe_code(code, classify_code(code))[0] != "UnknownAwsError"


def test_a_code_in_no_row_is_unknown_and_says_it_will_stop_retrying() -> None:
    assert classify_code("InvalidFrobnicatorState") is ErrorKind.UNKNOWN
    reason, fix = describe_code("InvalidFrobnicatorState", ErrorKind.UNKNOWN)
    assert reason == "UnknownAwsError" and "unknownErrorAttemptsBeforeRetry" in fix
