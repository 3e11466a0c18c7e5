"""ec2:PurchaseCapacityBlock in the controller's policy: absent unless buying is enabled;
when granted, only for a block tagged at purchase as this cluster's. Evaluated by the
emulator on the controller's own credentials (a role holding exactly the printed policy,
assumed through STS), with the tags the pool's purchase sends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devenv.emulator import EmulatorState
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.iam_policy import controller_policy, main
from provisioner.commands.checks import Failed
from provisioner.commands.doctor_aws import AwsLinks
from tests.support.backends import UNREACHED_BACKEND
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ACCOUNT = "123456789012"
CLUSTER = "demo"
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/nodes"
NO_RETRIES = Config(retries={"total_max_attempts": 1})
ROOT = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _client(service: str, keys: dict[str, str]) -> Any:
    return boto3.client(service, region_name=REGION, config=NO_RETRIES, **keys)


def _policy(buy: bool) -> dict[str, Any]:
    return controller_policy(
        account_id=ACCOUNT,
        region=REGION,
        node_role_arns=[NODE_ROLE],
        cluster_name=CLUSTER,
        buy_capacity_blocks=buy,
    )


def _granted(policy: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for statement in policy["Statement"]:
        action = statement["Action"]
        out |= {action} if isinstance(action, str) else set(action)
    return out


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch) as state:
        yield state


def _controller(buy: bool) -> Any:
    iam = _client("iam", ROOT)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    name = f"controller-{'buys' if buy else 'lists'}"
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps(_policy(buy)))
    creds = _client("sts", ROOT).assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName=name)
    keys = creds["Credentials"]
    return _client(
        "ec2",
        {
            "aws_access_key_id": keys["AccessKeyId"],
            "aws_secret_access_key": keys["SecretAccessKey"],
            "aws_session_token": keys["SessionToken"],
        },
    )


def _offering(emulator: EmulatorState) -> str:
    start = datetime.now(UTC) + timedelta(hours=1)
    emulator.offerings.add(
        account_id=ACCOUNT,
        region=REGION,
        instance_type="p5.48xlarge",
        availability_zone=f"{REGION}a",
        start=start.timestamp(),
        hours=24,
        instances=2,
        upfront_fee="100",
    )
    ec2 = _client("ec2", ROOT)
    found = ec2.describe_capacity_block_offerings(
        InstanceType="p5.48xlarge", InstanceCount=2, CapacityDurationHours=24
    )["CapacityBlockOfferings"]
    return str(found[0]["CapacityBlockOfferingId"])


def _buy(ec2: Any, offering: str, cluster: str, dry_run: bool = False) -> Any:
    tags = {c.TAG_MANAGED: "true", c.TAG_CLUSTER: cluster, c.TAG_PURCHASE_INTENT: "i-1"}
    return ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering,
        InstancePlatform="Linux/UNIX",
        TagSpecifications=[
            {
                "ResourceType": "capacity-reservation",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        ],
        DryRun=dry_run,
    )


def _code(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return str(caught.value.response["Error"]["Code"])


def test_the_purchase_is_printed_only_when_buying_is_enabled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "ec2:PurchaseCapacityBlock" not in _granted(_policy(False))
    assert "ec2:PurchaseCapacityBlock" in _granted(_policy(True))
    args = ["--account", ACCOUNT, "--region", REGION, "--node-role-arn", NODE_ROLE]
    main([*args, "--cluster-name", CLUSTER])
    assert "PurchaseCapacityBlock" not in capsys.readouterr().out
    main([*args, "--cluster-name", CLUSTER, "--buy-capacity-blocks"])
    assert "ec2:PurchaseCapacityBlock" in capsys.readouterr().out


def test_a_controller_that_may_not_buy_is_refused(emulator: EmulatorState) -> None:
    offering = _offering(emulator)
    assert _code(_buy, _controller(False), offering, CLUSTER) == "UnauthorizedOperation"
    assert _client("ec2", ROOT).describe_capacity_reservations()["CapacityReservations"] == []


def test_a_controller_that_may_buy_buys_only_for_its_own_cluster(emulator: EmulatorState) -> None:
    offering = _offering(emulator)
    ec2 = _controller(True)
    assert _code(_buy, ec2, offering, "another-cluster") == "UnauthorizedOperation"
    assert _code(_buy, ec2, offering, CLUSTER, dry_run=True) == "DryRunOperation"
    bought = _buy(ec2, offering, CLUSTER)["CapacityReservation"]["CapacityReservationId"]
    listed = _client("ec2", ROOT).describe_capacity_reservations()["CapacityReservations"]
    assert [r["CapacityReservationId"] for r in listed] == [bought]


def _links(buy_enabled: bool, may_buy: bool) -> AwsLinks:
    settings = Settings.model_validate(
        {
            "cluster_name": CLUSTER,
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": REGION, "node_role_arn": NODE_ROLE},
            "block_purchase": {"enabled": buy_enabled, "max_upfront_fee_per_gang": "1600"},
        }
    )
    ec2 = _controller(may_buy)
    clouds = CloudClients(ec2=ec2, ssm=None, eks=None, iam=None)  # type: ignore[arg-type]
    return AwsLinks(clouds=clouds, iam=None, settings=settings)


@pytest.mark.parametrize(
    ("enabled", "granted", "passes", "words"),
    [
        (False, False, True, "off"),
        (True, True, True, "may buy Capacity Blocks tagged for cluster demo"),
        (True, False, False, "--buy-capacity-blocks"),
    ],
    ids=["buying off", "on and granted", "on but not granted"],
)
def test_doctor_checks_the_purchase_with_dry_run(
    emulator: EmulatorState, enabled: bool, granted: bool, passes: bool, words: str
) -> None:
    links = _links(enabled, granted)
    if passes:
        assert words in links.block_purchase()
    else:
        with pytest.raises(Failed) as failed:
            links.block_purchase()
        assert words in failed.value.fix and "may not buy" in failed.value.detail
    assert _client("ec2", ROOT).describe_capacity_reservations()["CapacityReservations"] == []
