"""The classification table of AWS errors, and the sentences users get."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from provisioner.api import constants as c
from provisioner.cloud.errors import (
    CloudError,
    ErrorKind,
    classify,
    classify_code,
    error_code,
    is_capacity,
    is_config,
    is_not_found,
    is_retryable,
    to_cloud_error,
)

pytestmark = pytest.mark.unit


def client_error(code: str, status: int = 400, message: str = "AWS says no") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RunInstances",
    )


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InsufficientInstanceCapacity", 500, ErrorKind.CAPACITY),
        ("InsufficientHostCapacity", 400, ErrorKind.CAPACITY),
        ("InsufficientReservedInstanceCapacity", 400, ErrorKind.CAPACITY),
        ("InsufficientCapacityOnHost", 400, ErrorKind.CAPACITY),
        ("InsufficientCapacity", 400, ErrorKind.CAPACITY),
        ("ReservationCapacityExceeded", 400, ErrorKind.CAPACITY),
        ("InsufficientFreeAddressesInSubnet", 400, ErrorKind.CAPACITY),
        ("Unsupported", 400, ErrorKind.CAPACITY),
        ("InstanceLimitExceeded", 400, ErrorKind.CAPACITY),
        ("VcpuLimitExceeded", 400, ErrorKind.CAPACITY),
        ("RequestLimitExceeded", 503, ErrorKind.RETRYABLE),
        ("Throttling", 400, ErrorKind.RETRYABLE),
        ("ThrottlingException", 400, ErrorKind.RETRYABLE),
        ("InternalError", 500, ErrorKind.RETRYABLE),
        ("ServiceUnavailable", 503, ErrorKind.RETRYABLE),
        ("ExpiredToken", 400, ErrorKind.RETRYABLE),
        ("SomethingNew", 502, ErrorKind.RETRYABLE),
        ("InvalidAMIID.NotFound", 400, ErrorKind.CONFIG),
        ("InvalidAMIID.Malformed", 400, ErrorKind.CONFIG),
        ("InvalidSubnetID.NotFound", 400, ErrorKind.CONFIG),
        ("InvalidParameterValue", 400, ErrorKind.CONFIG),
        ("InvalidParameterCombination", 400, ErrorKind.CONFIG),
        ("UnauthorizedOperation", 403, ErrorKind.CONFIG),
        ("InvalidIamInstanceProfile.NotFound", 400, ErrorKind.CONFIG),
        ("InvalidCapacityReservationId.NotFound", 400, ErrorKind.CONFIG),
        ("InvalidLaunchTemplateId.NotFound", 400, ErrorKind.CONFIG),
        ("IdempotentParameterMismatch", 400, ErrorKind.CONFIG),
        ("ParameterNotFound", 400, ErrorKind.CONFIG),
        ("InvalidInstanceID.NotFound", 400, ErrorKind.NOT_FOUND),
        ("InvalidNetworkInterfaceID.NotFound", 400, ErrorKind.NOT_FOUND),
        ("MaxSpotInstanceCountExceeded", 400, ErrorKind.CONFIG),
        ("SomethingNew", 400, ErrorKind.UNKNOWN),
    ],
)
def test_classification_table(code: str, status: int, kind: ErrorKind) -> None:
    exc = client_error(code, status)
    assert classify(exc) is kind
    assert classify_code(code, status) is kind
    assert error_code(exc) == code
    assert is_capacity(exc) == (kind is ErrorKind.CAPACITY)
    assert is_retryable(exc) == (kind is ErrorKind.RETRYABLE)
    assert is_config(exc) == (kind is ErrorKind.CONFIG)
    assert is_not_found(exc) == (kind is ErrorKind.NOT_FOUND)


@pytest.mark.parametrize(
    "exc",
    [
        EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com"),
        ConnectTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com"),
    ],
)
def test_connection_failures_are_retryable(exc: Exception) -> None:
    assert classify(exc) is ErrorKind.RETRYABLE
    err = to_cloud_error(exc, "RunInstances")
    assert err.kind is ErrorKind.RETRYABLE and err.reason == "AwsUnavailable"


def test_sdk_configuration_failures_are_config_and_others_unknown() -> None:
    assert classify(NoCredentialsError()) is ErrorKind.CONFIG
    assert classify(RuntimeError("boom")) is ErrorKind.UNKNOWN


@pytest.mark.parametrize(
    ("code", "reason", "fix_mentions"),
    [
        ("InsufficientInstanceCapacity", "InsufficientCapacity", c.ANN_CAPACITY_RESERVATION_ID),
        ("ReservationCapacityExceeded", "ReservationFull", c.ANN_CAPACITY_RESERVATION_ID),
        ("VcpuLimitExceeded", "QuotaExceeded", "Service Quotas"),
        ("InvalidAMIID.NotFound", "InvalidAMI", c.ANN_AMI_ID),
        ("InvalidSubnetID.NotFound", "InvalidSubnet", c.ANN_SUBNETS),
        ("InvalidIamInstanceProfile.NotFound", "InstanceProfileNotFound", "instance-profile"),
        ("InvalidCapacityReservationId.Malformed", "InvalidCapacityReservation", "cr-"),
        ("UnauthorizedOperation", "AccessDenied", "IAM"),
        ("IdempotentParameterMismatch", "ClientTokenReused", "generation"),
        ("RequestLimitExceeded", "AwsUnavailable", "retried"),
    ],
)
def test_every_error_names_a_reason_and_a_fix(code: str, reason: str, fix_mentions: str) -> None:
    err = to_cloud_error(client_error(code, message="detail from AWS"), "RunInstances of 4 x p5")
    assert err.reason == reason
    assert fix_mentions in err.message
    assert "RunInstances of 4 x p5 failed" in err.message and "detail from AWS" in err.message
    assert str(err).startswith(f"{reason}: ")


def test_cloud_errors_pass_through_and_generation_rule() -> None:
    original = CloudError(
        ErrorKind.MALFORMED, None, "PartialFleet", "3 of 4", instance_ids=("i-1",)
    )
    assert to_cloud_error(original, "anything") is original
    assert classify(original) is ErrorKind.MALFORMED and original.ends_generation
    assert not CloudError(ErrorKind.RETRYABLE, None, "R", "m").ends_generation
    assert "PartialFleet" in repr(original)


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        (ErrorKind.CAPACITY, "capacity"),
        (ErrorKind.MALFORMED, "malformed"),
        (ErrorKind.CONFIG, "config"),
        (ErrorKind.RETRYABLE, "retryable"),
        (ErrorKind.NOT_FOUND, "retryable"),
        (ErrorKind.UNKNOWN, "unknown"),
    ],
)
def test_each_kind_is_one_failure_kind_of_the_state_machine(kind: ErrorKind, failure: str) -> None:
    assert CloudError(kind, None, "R", "m").failure == failure
