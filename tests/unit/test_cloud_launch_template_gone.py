"""A launch whose launch template (or placement group) was deleted outside the pool's stack,
in both modes, against the emulator: EC2 refuses it as not-found, nothing runs, and the
engine's failure sends the pool back to its stack's prepare (``FailureKind.NOT_PREPARED``)
with a message that says so — not a retry of the same missing template.

Whether an instant CreateFleet reports a missing template as a call error or as an entry of
its ``Errors`` list is not settled by EC2's documentation; the emulator answers the call
error, and the second answer is fed to the engine by a stand-in client here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.api.constants import FailureKind
from provisioner.cloud.errors import CloudError
from provisioner.cloud.fleet import launch_fleet
from tests.unit.test_cloud_fleet import fleet_spec
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _template_deleted(world: World, mode: str) -> Any:
    spec = fleet_spec(world, mode=mode)
    assert spec.launch_template is not None
    world.ec2.delete_launch_template(LaunchTemplateId=spec.launch_template.template_id)
    return spec


@pytest.mark.parametrize("mode", ["runinstances", "fleet"])
def test_a_launch_from_a_deleted_template_sends_the_pool_back_to_prepare(
    world: World, mode: str
) -> None:
    spec = _template_deleted(world, mode)
    with pytest.raises(CloudError) as caught:
        world.engine.acquire(spec)
    err = caught.value
    assert err.code == "InvalidLaunchTemplateId.NotFound"
    assert err.failure is FailureKind.NOT_PREPARED and not err.ends_generation
    assert err.reason == "LaunchTemplateNotFound"
    assert "refreshes the stack and makes the template again" in err.message
    assert world.live_instances() == []


class _FleetErrorsEntry:
    """CreateFleet answering the missing template inside ``Errors``, with no instance."""

    def __init__(self, template_id: str) -> None:
        self.template_id = template_id

    def create_fleet(self, **_: Any) -> dict[str, Any]:
        return {
            "FleetId": "fleet-00000000-0000-0000-0000-000000000000",
            "Instances": [],
            "Errors": [
                {
                    "ErrorCode": "InvalidLaunchTemplateId.NotFound",
                    "ErrorMessage": f"The launch template {self.template_id} does not exist.",
                    "Lifecycle": "on-demand",
                }
            ],
        }


def test_a_fleet_that_reports_the_template_gone_in_its_errors_is_the_same_failure(
    world: World,
) -> None:
    spec = _template_deleted(world, "fleet")
    ec2: Any = _FleetErrorsEntry(spec.launch_template.template_id)
    with pytest.raises(CloudError) as caught:
        launch_fleet(ec2, spec)
    assert caught.value.failure is FailureKind.NOT_PREPARED
    assert caught.value.reason == "LaunchTemplateNotFound"
