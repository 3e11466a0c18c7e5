"""A launch template deleted outside the product, as EC2 answers for it, in-process: a
RunInstances or instant CreateFleet naming it, a DescribeLaunchTemplates naming its id and a
second DeleteLaunchTemplate all fail with ``InvalidLaunchTemplateId.NotFound`` and launch
nothing; a listing by filter that matches nothing is still an empty success. And
CreateLaunchTemplate's ClientToken: a repeat answers the original template (deleted or not),
a repeat with other parameters is refused, a new token makes a new one."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.emulator import EmulatorState
from tests.unit.test_emulator_fleet_reserved import fleet, template
from tests.unit.test_emulator_reservations import (
    clock,
    ec2,
    emulator,
    live_count,
    refusal,
    run,
)

pytestmark = pytest.mark.unit
__all__ = ["clock", "emulator"]  # the fixtures, used by name

NOT_FOUND = "InvalidLaunchTemplateId.NotFound"


def _deleted(emulator: EmulatorState) -> str:
    template_id = template("drift-lt")
    ec2().delete_launch_template(LaunchTemplateId=template_id)
    return template_id


def test_a_launch_naming_a_deleted_template_fails_not_found_and_launches_nothing(
    emulator: EmulatorState,
) -> None:
    template_id = _deleted(emulator)
    spec = {"LaunchTemplateId": template_id, "Version": "$Default"}
    code, message = refusal(lambda: run(2, LaunchTemplate=spec))
    assert (code, template_id in message) == (NOT_FOUND, True)
    code, _ = refusal(lambda: fleet(template_id, 2, ["us-east-1a"]))
    assert code == NOT_FOUND
    assert live_count() == 0


def test_describe_and_delete_of_a_deleted_template_id_fail_not_found(
    emulator: EmulatorState,
) -> None:
    template_id = _deleted(emulator)
    code, _ = refusal(lambda: ec2().describe_launch_templates(LaunchTemplateIds=[template_id]))
    assert code == NOT_FOUND
    code, _ = refusal(lambda: ec2().delete_launch_template(LaunchTemplateId=template_id))
    assert code == NOT_FOUND
    by_name = refusal(lambda: ec2().describe_launch_templates(LaunchTemplateNames=["drift-lt"]))
    assert by_name[0] == "InvalidLaunchTemplateName.NotFoundException"
    filtered = ec2().describe_launch_templates(
        Filters=[{"Name": "launch-template-name", "Values": ["drift-lt"]}]
    )
    assert filtered["LaunchTemplates"] == []


# --- CreateLaunchTemplate's ClientToken ("Ensuring idempotency in Amazon EC2 API requests") --
def _create(name: str, token: str, instance_type: str = "p5.48xlarge") -> Any:
    return ec2().create_launch_template(
        LaunchTemplateName=name,
        ClientToken=token,
        LaunchTemplateData={"ImageId": "ami-12345678", "InstanceType": instance_type},
    )["LaunchTemplate"]


def test_a_repeated_token_answers_the_original_template_even_once_deleted(
    emulator: EmulatorState,
) -> None:
    first = _create("lt-token", "tok-1")
    assert _create("lt-token", "tok-1")["LaunchTemplateId"] == first["LaunchTemplateId"]
    ec2().delete_launch_template(LaunchTemplateId=first["LaunchTemplateId"])
    # The retry creates nothing: the answer is the deleted template's.
    replayed = _create("lt-token", "tok-1")
    assert replayed["LaunchTemplateId"] == first["LaunchTemplateId"]
    listed = ec2().describe_launch_templates(
        Filters=[{"Name": "launch-template-name", "Values": ["lt-token"]}]
    )
    assert listed["LaunchTemplates"] == []
    # A new token makes a new template.
    again = _create("lt-token", "tok-2")
    assert again["LaunchTemplateId"] != first["LaunchTemplateId"]


def test_a_repeated_token_with_other_parameters_is_refused(emulator: EmulatorState) -> None:
    _create("lt-mismatch", "tok-m")
    code, _ = refusal(lambda: _create("lt-mismatch", "tok-m", instance_type="m5.large"))
    assert code == "IdempotentParameterMismatch"


def test_a_create_without_a_token_is_not_remembered(emulator: EmulatorState) -> None:
    data = {"ImageId": "ami-12345678", "InstanceType": "m5.large"}
    first = ec2().create_launch_template(LaunchTemplateName="lt-free", LaunchTemplateData=data)
    ec2().delete_launch_template(LaunchTemplateId=first["LaunchTemplate"]["LaunchTemplateId"])
    second = ec2().create_launch_template(LaunchTemplateName="lt-free", LaunchTemplateData=data)
    assert (
        second["LaunchTemplate"]["LaunchTemplateId"] != first["LaunchTemplate"]["LaunchTemplateId"]
    )
