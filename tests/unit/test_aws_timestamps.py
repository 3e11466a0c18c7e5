"""The clients' timestamp parser: the same datetimes botocore's own parser gives, faster.

`provisioner.cloud.ec2api.new_session` sets `parse_aws_timestamp` as every client's
timestamp parser; these tests hold it to botocore's answers, on the values AWS sends and on
the ones that must fall through to botocore.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.utils import parse_timestamp
from moto import mock_aws

from provisioner.cloud.ec2api import default_session, make_client, parse_aws_timestamp

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01T16:55:23.000Z",  # EC2's LaunchTime
        "2026-12-01T16:55:23Z",
        "2026-12-01T16:55:23.123456+00:00",
        "2026-12-01T18:55:23+02:00",
        "2026-12-01T16:55:23",  # naive: botocore's parser decides
        "Tue, 01 Dec 2026 16:55:23 GMT",  # RFC 822
        "1796144123",  # epoch seconds, as a string
        1796144123,  # and as a number (JSON protocols)
        1796144123.5,
    ],
)
def test_same_datetime_as_botocore(value: object) -> None:
    ours, theirs = parse_aws_timestamp(value), parse_timestamp(value)
    assert ours == theirs
    assert ours.utcoffset() == theirs.utcoffset()


def test_an_unreadable_timestamp_fails_as_botocore_fails() -> None:
    with pytest.raises(ValueError, match="Invalid timestamp"):
        parse_aws_timestamp("not a time")


def test_clients_of_the_session_use_it() -> None:
    """A real client of `default_session` reads EC2's LaunchTime as an aware UTC datetime."""
    with mock_aws():
        ec2 = make_client(default_session(), "ec2", "us-east-1", None, None)
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        before = datetime.now(UTC).replace(microsecond=0)
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.micro")
        [reservation] = ec2.describe_instances()["Reservations"]
        launched = reservation["Instances"][0]["LaunchTime"]
    assert launched.utcoffset().total_seconds() == 0
    assert launched >= before
    parser = default_session()._session.get_component("response_parser_factory")
    assert parser._defaults["timestamp_parser"] is parse_aws_timestamp
