"""`atomic-gang doctor`'s launch check: EC2's answer to the launch the controller would send.

The answer -> line mapping is pinned on its own; then the whole check runs against the
emulator in-process, which answers DryRun, the caller's IAM policy and the subnet/security
group VPC check as EC2 does (`devenv.emulator.authorization`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devenv.emulator import EmulatorState
from devenv.emulator.model import ClusterSpec
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import build_clients
from provisioner.commands.checks import Failed, Warned
from provisioner.commands.doctor_launch import (
    DryRunAnswer,
    LaunchCheck,
    LaunchShape,
    answer_line,
)
from tests.support.backends import UNREACHED_BACKEND
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/nodes"
NO_RETRIES = Config(retries={"total_max_attempts": 1})
CALL = "RunInstances of 2 x m5.large in subnet-1 (us-east-1a)"


# --- the answer -> line mapping ------------------------------------------------------------
def test_dry_run_operation_is_a_pass() -> None:
    verdict, line, fix = answer_line(DryRunAnswer(CALL, "ec2:RunInstances", "DryRunOperation"))
    assert (verdict, fix) == ("pass", "")
    assert "would accept" in line and CALL in line


def test_unauthorized_names_the_decoded_action_and_how_to_grant_it() -> None:
    answer = DryRunAnswer(
        "CreateFleet of 2 x p5.48xlarge over us-east-1a",
        "ec2:CreateFleet",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. Encoded authorization ...",
        missing_action="ec2:CreateTags",
    )
    verdict, line, fix = answer_line(answer)
    assert verdict == "fail"
    assert "ec2:CreateTags" in line and "ec2:CreateTags" in fix and "allow" in fix


def test_unauthorized_without_a_decoded_message_names_the_calls_action() -> None:
    answer = DryRunAnswer(CALL, "ec2:RunInstances", "UnauthorizedOperation", "denied")
    verdict, line, fix = answer_line(answer)
    assert verdict == "fail" and "ec2:RunInstances" in line and "ec2:RunInstances" in fix


def test_a_security_group_of_another_vpc_than_the_subnet_says_to_use_the_clusters_vpc() -> None:
    message = "Security group sg-1 and subnet subnet-9 belong to different networks."
    verdict, line, fix = answer_line(
        DryRunAnswer(CALL, "ec2:RunInstances", "InvalidParameter", message)
    )
    assert verdict == "fail" and message in line
    assert "VPC" in fix and c.ANN_SUBNETS in fix


def test_a_missing_subnet_gets_the_products_own_fix() -> None:
    verdict, line, fix = answer_line(
        DryRunAnswer(CALL, "ec2:RunInstances", "InvalidSubnetID.NotFound", "no subnet-1")
    )
    assert verdict == "fail" and "InvalidSubnetID.NotFound" in line
    assert c.ANN_SUBNETS in fix


def test_a_fleet_before_its_template_exists_is_a_warning_not_a_pass() -> None:
    answer = DryRunAnswer(
        "CreateFleet of 2 x m5.large over us-east-1a",
        "ec2:CreateFleet",
        "InvalidLaunchTemplateName.NotFoundException",
        "not found",
        template_pending=True,
    )
    verdict, _, fix = answer_line(answer)
    assert verdict == "warn" and "run doctor again" in fix


# --- the check on the emulator -------------------------------------------------------------
@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch) as state:
        state.register_eks_cluster(ClusterSpec(name="demo"))
        yield state


def _settings() -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": REGION, "nodeRoleArn": ROLE},
            "pulumi": UNREACHED_BACKEND,
        }
    )


def _session(keys: tuple[str, str] | None = None) -> Any:
    key, secret = keys or ("local", "local")
    return boto3.session.Session(
        aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION
    )


def _check(shape: LaunchShape, keys: tuple[str, str] | None = None) -> LaunchCheck:
    session = _session(keys)
    clouds = build_clients(session, REGION, max_attempts=1)
    sts = session.client("sts", config=NO_RETRIES)
    settings = _settings()
    return LaunchCheck(clouds, sts, settings, shape.shape(settings))


def _user_without(action: str) -> tuple[str, str]:
    """An IAM user whose policy allows every launch call but `action`."""
    iam = _session().client("iam", config=NO_RETRIES)
    iam.create_user(UserName="platform")
    allowed = [
        "ec2:Describe*",
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ssm:GetParameter",
        "eks:DescribeCluster",
        "sts:DecodeAuthorizationMessage",
    ]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": [a for a in allowed if a != action], "Resource": "*"}
        ],
    }
    iam.put_user_policy(UserName="platform", PolicyName="p", PolicyDocument=json.dumps(policy))
    made = iam.create_access_key(UserName="platform")["AccessKey"]
    return str(made["AccessKeyId"]), str(made["SecretAccessKey"])


def _launches(emulator: EmulatorState) -> list[dict[str, Any]]:
    return list(emulator.launch_requests(None, None))


def _live_instances() -> int:
    ec2 = _session().client("ec2", config=NO_RETRIES)
    return sum(len(r["Instances"]) for r in ec2.describe_instances()["Reservations"])


def test_a_valid_shape_would_launch_and_launches_nothing(emulator: EmulatorState) -> None:
    line = _check(LaunchShape("m5.large", 2, zones=("us-east-1a", "us-east-1b"))).run()
    assert line.startswith("would launch")
    assert "CreateLaunchTemplate" in line and line.count("RunInstances of 2 x m5.large") == 2
    sent = _launches(emulator)
    assert [(r["action"], r["error"], r["instance_ids"]) for r in sent] == [
        ("RunInstances", "DryRunOperation", []),
        ("RunInstances", "DryRunOperation", []),
    ]
    assert all(str(r["params"].get("DryRun")).lower() == "true" for r in sent)
    assert _live_instances() == 0
    ec2 = _session().client("ec2", config=NO_RETRIES)
    assert ec2.describe_launch_templates()["LaunchTemplates"] == []


def test_a_policy_without_create_fleet_is_refused_naming_it(emulator: EmulatorState) -> None:
    keys = _user_without("ec2:CreateFleet")
    ec2 = _session().client("ec2", config=NO_RETRIES)
    # The pool's template as the stack made it: the fleet request is then checked whole.
    check = _check(LaunchShape("m5.large", 2, mode=c.MODE_FLEET), keys)
    name = f"atomic-gang-demo-{check.shape.pool}"
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": ami, "InstanceType": "m5.large"}
    )
    with pytest.raises(Failed) as failed:
        check.run()
    assert "UnauthorizedOperation" in failed.value.detail
    assert "ec2:CreateFleet" in failed.value.detail and "ec2:CreateFleet" in failed.value.fix
    assert [r["error"] for r in _launches(emulator)] == ["UnauthorizedOperation"]
    assert _live_instances() == 0


def test_a_fleet_before_its_template_exists_warns_after_the_permission_passed(
    emulator: EmulatorState,
) -> None:
    emulator.set_dry_run_validation(True)  # an EC2 that also checks parameters on a dry run
    with pytest.raises(Warned) as warned:
        _check(LaunchShape("m5.large", 2, mode=c.MODE_FLEET)).run()
    assert "CreateLaunchTemplate" in warned.value.detail and "permitted" in warned.value.detail
    assert _live_instances() == 0


def test_a_subnet_of_another_vpc_gets_ec2s_parameter_error(emulator: EmulatorState) -> None:
    emulator.set_dry_run_validation(True)
    ec2 = _session().client("ec2", config=NO_RETRIES)
    vpc = ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]
    other = ec2.create_subnet(VpcId=vpc, CidrBlock="10.99.1.0/24", AvailabilityZone="us-east-1a")
    subnet = other["Subnet"]["SubnetId"]
    check = _check(LaunchShape("m5.large", 2, subnets=(subnet,)))
    # The pool's template as the stack made it: the launch request is then checked whole.
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-demo-{check.shape.pool}",
        LaunchTemplateData={"ImageId": ami, "InstanceType": "m5.large"},
    )
    with pytest.raises(Failed) as failed:
        check.run()
    assert "InvalidParameter" in failed.value.detail
    assert "belong to different networks" in failed.value.detail
    assert "VPC" in failed.value.fix
    assert [r["error"] for r in _launches(emulator)] == ["InvalidParameter"]


# --- the emulator's answers themselves ------------------------------------------------------
def test_the_emulators_dry_run_answers_412_after_its_checks_when_switched(
    emulator: EmulatorState,
) -> None:
    emulator.set_dry_run_validation(True)
    ec2 = _session().client("ec2", config=NO_RETRIES)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    with pytest.raises(ClientError) as refused:
        ec2.run_instances(
            ImageId=ami, MinCount=1, MaxCount=1, SubnetId="subnet-00000000", DryRun=True
        )
    assert refused.value.response["Error"]["Code"] == "InvalidSubnetID.NotFound"
    with pytest.raises(ClientError) as answered:
        ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, DryRun=True)
    assert answered.value.response["Error"]["Code"] == "DryRunOperation"
    assert answered.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_the_emulators_dry_run_is_a_permission_check_by_default(emulator: EmulatorState) -> None:
    """EC2's DryRun parameter: "Checks whether you have the required permissions for the
    action, without actually making the request": a subnet, a template or a reservation
    that does not exist is not looked at, and nothing is launched or created."""
    ec2 = _session().client("ec2", config=NO_RETRIES)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    calls = [
        lambda: ec2.run_instances(
            ImageId=ami, MinCount=1, MaxCount=1, SubnetId="subnet-00000000", DryRun=True
        ),
        lambda: ec2.run_instances(
            MinCount=1,
            MaxCount=1,
            LaunchTemplate={"LaunchTemplateName": "none-such", "Version": "$Latest"},
            DryRun=True,
        ),
        lambda: ec2.create_fleet(
            Type="instant",
            TargetCapacitySpecification={
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "on-demand",
            },
            LaunchTemplateConfigs=[
                {"LaunchTemplateSpecification": {"LaunchTemplateName": "none-such"}}
            ],
            DryRun=True,
        ),
    ]
    for call in calls:
        with pytest.raises(ClientError) as answered:
            call()
        assert answered.value.response["Error"]["Code"] == "DryRunOperation"
        assert answered.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    denied = _session(_user_without("ec2:RunInstances")).client("ec2", config=NO_RETRIES)
    with pytest.raises(ClientError) as refused:
        denied.run_instances(
            ImageId=ami, MinCount=1, MaxCount=1, SubnetId="subnet-00000000", DryRun=True
        )
    assert refused.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert _live_instances() == 0 and ec2.describe_fleets()["Fleets"] == []


def test_the_emulators_dry_run_validation_switch_is_on_the_control_api(
    emulator: EmulatorState,
) -> None:
    from werkzeug.test import Client

    from devenv.emulator.server import ControlApp

    control = Client(ControlApp(emulator, aws_app=lambda environ, start: []))
    assert control.post("/_emulator/dry-run-validation", json={"on": "yes"}).status_code == 400
    assert control.post("/_emulator/dry-run-validation", json={"on": True}).status_code == 200
    assert emulator.dry_run_validates
    assert control.post("/_emulator/dry-run-validation", json={"on": False}).status_code == 200
    assert not emulator.dry_run_validates


def test_the_emulators_unauthorized_answer_decodes_to_the_action(
    emulator: EmulatorState,
) -> None:
    session = _session(_user_without("ec2:RunInstances"))
    ec2 = session.client("ec2", config=NO_RETRIES)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    with pytest.raises(ClientError) as refused:
        ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, DryRun=True)
    error = refused.value.response["Error"]
    assert error["Code"] == "UnauthorizedOperation"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    encoded = error["Message"].rsplit("Encoded authorization failure message: ", 1)[1]
    decoded = session.client("sts", config=NO_RETRIES).decode_authorization_message(
        EncodedMessage=encoded
    )
    assert json.loads(decoded["DecodedMessage"])["context"]["action"] == "ec2:RunInstances"


def test_a_valid_fleet_on_the_pools_template_would_launch(emulator: EmulatorState) -> None:
    check = _check(LaunchShape("m5.large", 2, mode=c.MODE_FLEET))
    ec2 = _session().client("ec2", config=NO_RETRIES)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-demo-{check.shape.pool}",
        LaunchTemplateData={"ImageId": ami, "InstanceType": "m5.large"},
    )
    line = check.run()
    assert line.startswith("would launch") and "CreateFleet of 2 x m5.large" in line
    assert "CreateLaunchTemplate" not in line  # the template exists: only the fleet is sent
    sent = _launches(emulator)
    assert [(r["action"], r["error"]) for r in sent] == [("CreateFleet", "DryRunOperation")]
    assert ec2.describe_fleets()["Fleets"] == [] and _live_instances() == 0


# --- the command line -----------------------------------------------------------------------
def test_the_launch_flags_make_the_shape_and_a_job_file_is_read_as_a_path() -> None:
    from pathlib import Path

    from provisioner.commands import cli

    args = cli.build_parser().parse_args(
        [
            "doctor",
            "--launch-type",
            "p5.48xlarge",
            "--launch-count",
            "4",
            "--launch-mode",
            "fleet",
            "--launch-zones",
            "us-east-1a,us-east-1b",
            "--launch-reservation",
            "cr-0123456789abcdef0",
        ]
    )
    assert cli._launch(args) == LaunchShape(
        "p5.48xlarge",
        4,
        mode="fleet",
        zones=("us-east-1a", "us-east-1b"),
        reservation="cr-0123456789abcdef0",
    )
    job = cli.build_parser().parse_args(["doctor", "--launch-job", "job.yaml"])
    assert cli._launch(job) == Path("job.yaml")
    assert cli._launch(cli.build_parser().parse_args(["doctor"])) is None
