"""The instance profile a launch names, as EC2 answers for one it does not know, in-process:
RunInstances refuses with ``InvalidParameterValue`` (by name: "... Invalid IAM Instance
Profile name"; from a template's ARN: "... Invalid IAM Instance Profile ARN"), never IAM's
``NoSuchEntity``; an instant fleet lists the answer per override and launches nothing; and
with the propagation lag on, a profile made a moment ago is not known yet."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from devenv.emulator import EmulatorState
from tests.unit.test_emulator_fleet_reserved import fleet, template
from tests.unit.test_emulator_reservations import (
    NO_RETRIES,
    REGION,
    clock,
    emulator,
    live_count,
    refusal,
    run,
)

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # the fixtures, used by name


def iam() -> Any:
    return boto3.session.Session(region_name=REGION).client("iam", config=NO_RETRIES)


def _profile(name: str) -> str:
    made = iam().create_instance_profile(InstanceProfileName=name)
    return str(made["InstanceProfile"]["Arn"])


def test_run_instances_naming_an_unknown_profile_is_refused_as_ec2_refuses_it(
    emulator: EmulatorState,
) -> None:
    code, message = refusal(lambda: run(1, IamInstanceProfile={"Name": "nope"}))
    assert code == "InvalidParameterValue"
    assert message == (
        "Value (nope) for parameter iamInstanceProfile.name is invalid. "
        "Invalid IAM Instance Profile name"
    )
    arn = _profile("gone-soon")
    iam().delete_instance_profile(InstanceProfileName="gone-soon")
    from_template = template("lt-profile", IamInstanceProfile={"Arn": arn})
    spec = {"LaunchTemplateId": from_template, "Version": "$Default"}
    code, message = refusal(lambda: run(1, LaunchTemplate=spec))
    assert code == "InvalidParameterValue"
    assert message.endswith("is invalid. Invalid IAM Instance Profile ARN") and arn in message
    assert live_count() == 0


def test_an_instant_fleet_lists_the_unknown_profile_per_override_and_launches_nothing(
    emulator: EmulatorState,
) -> None:
    arn = "arn:aws:iam::123456789012:instance-profile/never-made"
    from_template = template("lt-fleet-profile", IamInstanceProfile={"Arn": arn})
    answer = fleet(from_template, 2, ["us-east-1a", "us-east-1b"])
    assert answer["Instances"] == []
    assert [e["ErrorCode"] for e in answer["Errors"]] == ["InvalidParameterValue"] * 2
    assert {e["ErrorMessage"] for e in answer["Errors"]} == {
        f"Value ({arn}) for parameter iamInstanceProfile.arn is invalid. "
        "Invalid IAM Instance Profile ARN"
    }
    assert live_count() == 0


def test_a_known_profile_launches(emulator: EmulatorState) -> None:
    arn = _profile("known")
    from_template = template("lt-known", IamInstanceProfile={"Arn": arn})
    spec = {"LaunchTemplateId": from_template, "Version": "$Default"}
    assert len(run(1, LaunchTemplate=spec)["Instances"]) == 1
    assert len(run(1, IamInstanceProfile={"Name": "known"})["Instances"]) == 1
    answer = fleet(from_template, 2, ["us-east-1a"])
    assert answer["Errors"] == [] and len(answer["Instances"][0]["InstanceIds"]) == 2


def test_with_the_lag_a_fresh_profile_is_unknown_until_it_has_propagated(
    emulator: EmulatorState,
) -> None:
    emulator.set_instance_profile_lag(3600)
    _profile("fresh")
    code, _ = refusal(lambda: run(1, IamInstanceProfile={"Name": "fresh"}))
    assert code == "InvalidParameterValue"
    emulator.set_instance_profile_lag(0)
    assert len(run(1, IamInstanceProfile={"Name": "fresh"})["Instances"]) == 1


def test_a_launch_that_names_no_profile_is_not_refused(emulator: EmulatorState) -> None:
    assert len(run(1)["Instances"]) == 1
    answer = fleet(template("lt-none"), 1, ["us-east-1a"])
    assert answer["Errors"] == [] and len(answer["Instances"]) == 1
