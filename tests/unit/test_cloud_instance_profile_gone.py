"""A launch whose node instance profile EC2 does not know, in both modes, against the
emulator: EC2 answers ``InvalidParameterValue`` "... Invalid IAM Instance Profile ARN"
(RunInstances refuses the call; an instant fleet lists it per override and launches
nothing), and the engine's failure names the stack's instance profile as missing
(``CloudError.gone``), which sends the pool back to its stack, not to "fix the pool's
shape". The same code with another message stays a request error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped,unused-ignore]

from provisioner.api.constants import FailureKind
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.stack_gone import StackResource, gone_resource
from tests.unit.test_cloud_fleet import fleet_spec
from tests.unit.test_cloud_helpers import ROLE_NAME, World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _profile_deleted(world: World, mode: str) -> Any:
    spec = fleet_spec(world, mode=mode)
    name = world.profile.name
    world.clients.iam.remove_role_from_instance_profile(
        InstanceProfileName=name, RoleName=ROLE_NAME
    )
    world.clients.iam.delete_instance_profile(InstanceProfileName=name)
    return spec


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_a_launch_whose_profile_ec2_does_not_know_names_the_profile_gone(
    world: World, mode: str
) -> None:
    spec = _profile_deleted(world, mode)
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec)
    err = caught.value
    assert (err.code, err.kind, err.gone) == (
        "InvalidParameterValue",
        ErrorKind.CONFIG,
        StackResource.INSTANCE_PROFILE,
    )
    assert err.failure is FailureKind.NOT_PREPARED
    assert err.reason == "InstanceProfileNotFound"
    assert "Invalid IAM Instance Profile ARN" in err.message
    assert "fix the pool's shape" not in err.message
    assert world.live_instances() == []


def _answer(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "RunInstances")


@pytest.mark.parametrize(
    ("code", "message", "gone"),
    [
        (
            "InvalidParameterValue",
            "Value (p) for parameter iamInstanceProfile.name is invalid. "
            "Invalid IAM Instance Profile name",
            StackResource.INSTANCE_PROFILE,
        ),
        (
            "InvalidParameterValue",
            "Value (arn:aws:iam::1:instance-profile/p) for parameter iamInstanceProfile.arn "
            "is invalid. Invalid IAM Instance Profile ARN",
            StackResource.INSTANCE_PROFILE,
        ),
        ("InvalidParameterValue", "Value (x) for parameter instanceType is invalid.", None),
        ("InvalidParameterCombination", "Invalid IAM Instance Profile name", None),
        ("InvalidLaunchTemplateId.NotFound", "lt-1", StackResource.LAUNCH_TEMPLATE),
        ("InvalidPlacementGroup.Unknown", "pg", StackResource.PLACEMENT_GROUP),
    ],
)
def test_which_answers_name_a_resource_of_the_stack(
    code: str, message: str, gone: StackResource | None
) -> None:
    assert gone_resource(code, message) is gone
    err = to_cloud_error(_answer(code, message), "RunInstances")
    assert err.gone is gone
    assert (err.failure is FailureKind.NOT_PREPARED) is (gone is not None)
