"""One request, two users: `atomic-gang doctor`'s dry run sends the launch the controller sends.

For each mode, reservation kind and EFA layout, one launch (`pool_facts.launch_spec`, then
`engine.targeted_spec` for a reservation, as both build it) is sent twice against a recording
EC2: by the controller's launch (`launch_runinstances` / `launch_fleet`, what
`Ec2Engine.acquire` calls) and by doctor's check (`LaunchCheck.launch_answers`). Every request
is compared field by field, so a field either side drops or adds fails here.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import parse_gang_shape
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.engine import targeted_spec
from provisioner.cloud.errors import CloudError
from provisioner.cloud.fleet import launch_fleet
from provisioner.cloud.runinstances import launch_runinstances
from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceTypeInfo,
    LaunchSpec,
    Reservation,
    SubnetRef,
)
from provisioner.commands.doctor_launch import LaunchCheck
from provisioner.controllers.pool.facts import LaunchFacts, LaunchTarget, StackNames, launch_spec
from tests.support.backends import UNREACHED_BACKEND

pytestmark = pytest.mark.unit

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/nodes"
SUBNETS = (
    SubnetRef("subnet-aaaaaaaa", "us-east-1a"),
    SubnetRef("subnet-bbbbbbbb", "us-east-1b"),
)
CLUSTER = ClusterInfo(
    name="demo",
    arn=None,
    status="ACTIVE",
    version="1.31",
    endpoint="https://demo.example",
    certificate_authority="Y2E=",
    service_cidr="10.100.0.0/16",
    vpc_id="vpc-1",
    subnet_ids=tuple(s.subnet_id for s in SUBNETS),
    security_group_ids=("sg-1",),
)
# EFA layouts: none; EFA on every card (p4d: interfaces); EFA-only cards where the type has
# them (p5: an ENA primary, efa-only elsewhere; `test_efa_only_layout`).
P4D = InstanceTypeInfo("p4d.24xlarge", ("x86_64",), True, 4, (0, 1, 2, 3))
P5 = InstanceTypeInfo("p5.48xlarge", ("x86_64",), True, 32, tuple(range(32)), tuple(range(32)))
LAYOUTS: dict[str, InstanceTypeInfo | None] = {"no-efa": None, "efa": P4D, "efa-only": P5}
RESERVATIONS = ("none", "odcr", "capacity-block")
MODES = (c.MODE_RUNINSTANCES, c.MODE_FLEET)


def _settings() -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
            "pulumi": UNREACHED_BACKEND,
        }
    )


def _reservation(kind: str, instance_type: str) -> Reservation | None:
    if kind == "none":
        return None
    block = kind == "capacity-block"
    return Reservation(
        reservation_id="cr-0123456789abcdef0",
        kind="capacity-block" if block else "odcr",
        instance_type=instance_type,
        availability_zone="us-east-1b",
        total=8,
        available=8,
        state="active",
        start=NOW - timedelta(hours=1) if block else None,
        end=NOW + timedelta(days=1) if block else None,
        match_criteria="targeted",
        placement_group_name="pg-block" if block else None,
    )


def _spec(mode: str, reservation: str, layout: str) -> LaunchSpec:
    settings = _settings()
    info = LAYOUTS[layout]
    instance_type = info.instance_type if info else "m5.large"
    found = _reservation(reservation, instance_type)
    annotations = {
        c.ANN_INSTANCE_TYPE: instance_type,
        c.ANN_COUNT: "2",
        c.ANN_MODE: mode,
    }
    if info is not None:
        annotations[c.ANN_EFA] = "true"
    if found is not None:
        annotations[c.ANN_CAPACITY_RESERVATION_ID] = found.reservation_id
    shape = parse_gang_shape({c.POOL_LABEL: "train"}, annotations, 2, settings)
    spec = launch_spec(
        settings,
        target=LaunchTarget(pool_name="train", pool_uid="uid-1", generation=3, group="g3"),
        shape=shape,
        facts=LaunchFacts(
            cluster=CLUSTER,
            ami=AmiChoice("ami-0123456789abcdef0", "ssm"),
            instance_type=info,
            reservation=found,
        ),
        subnets=SUBNETS,
        stack=StackNames(
            template_id="lt-0123456789abcdef0",
            instance_profile_name="atomic-gang-demo-train",
            placement_group_name="atomic-gang-demo-train",
        ),
    )
    return spec if found is None else targeted_spec(spec, found, NOW)


class RecordingEc2:
    """EC2 as a recorder: every launch call's parameters, answered as a capacity shortfall
    (so the controller's RunInstances sweep sends every try) or, for a dry run, as
    DryRunOperation."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def _answer(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((action, copy.deepcopy(params)))
        if params.get("DryRun"):
            raise ClientError(
                {"Error": {"Code": "DryRunOperation", "Message": "would have succeeded"}}, action
            )
        if action == "CreateFleet":
            return {"FleetId": "fleet-1", "Instances": [], "Errors": []}
        raise ClientError(
            {"Error": {"Code": "InsufficientInstanceCapacity", "Message": "none"}}, action
        )

    def run_instances(self, **params: Any) -> dict[str, Any]:
        return self._answer("RunInstances", params)

    def create_fleet(self, **params: Any) -> dict[str, Any]:
        return self._answer("CreateFleet", params)


def _controller_requests(spec: LaunchSpec) -> list[tuple[str, dict[str, Any]]]:
    ec2 = RecordingEc2()
    with pytest.raises(CloudError):  # the recorder launches nothing
        if spec.mode == c.MODE_FLEET:
            launch_fleet(ec2, spec)  # type: ignore[arg-type]
        else:
            launch_runinstances(ec2, spec, spec.instance_type_info)  # type: ignore[arg-type]
    return ec2.sent


def _doctor_requests(spec: LaunchSpec) -> list[tuple[str, dict[str, Any]]]:
    ec2 = RecordingEc2()
    clouds = CloudClients(ec2=ec2, ssm=None, eks=None, iam=None)  # type: ignore[arg-type]
    settings = _settings()
    shape = parse_gang_shape(
        {c.POOL_LABEL: "train"},
        {c.ANN_INSTANCE_TYPE: spec.instance_type, c.ANN_COUNT: "2", c.ANN_MODE: spec.mode},
        2,
        settings,
    )
    answers = LaunchCheck(clouds, None, settings, shape).launch_answers(spec, None)
    assert {a.code for a in answers} == {"DryRunOperation"}
    sent = []
    for action, params in ec2.sent:
        assert params.pop("DryRun") is True  # and nothing else differs
        sent.append((action, params))
    return sent


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("reservation", RESERVATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_doctor_sends_the_controllers_launch_field_by_field(
    mode: str, reservation: str, layout: str
) -> None:
    spec = _spec(mode, reservation, layout)
    controller = _controller_requests(spec)
    doctor = _doctor_requests(spec)
    assert [a for a, _ in doctor] == [a for a, _ in controller]
    assert controller, "the controller sent nothing"
    for (_, ours), (_, theirs) in zip(doctor, controller, strict=True):
        assert sorted(ours) == sorted(theirs), "a field only one side sends"
        for name in theirs:
            assert ours[name] == theirs[name], name


def test_the_cases_carry_the_fields_they_are_about() -> None:
    """The table covers what it claims: tags, placement, the reservation target and each EFA
    layout reach the request (so comparing them compares something)."""
    fleet = _controller_requests(_spec(c.MODE_FLEET, "odcr", "no-efa"))[0][1]
    assert fleet["TagSpecifications"] and "ReservedCapacityOptions" in fleet
    run = _controller_requests(_spec(c.MODE_RUNINSTANCES, "capacity-block", "efa-only"))[0][1]
    assert run["Placement"] == {"GroupName": "pg-block"}
    assert run["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert {i.get("InterfaceType") for i in run["NetworkInterfaces"]} >= {"efa-only"}
    efa = _controller_requests(_spec(c.MODE_RUNINSTANCES, "none", "efa"))
    assert len(efa) == 2 and all(
        {i.get("InterfaceType") for i in p["NetworkInterfaces"]} == {"efa"} for _, p in efa
    )


def test_before_the_first_prepare_doctor_launches_on_the_template_by_name() -> None:
    """The controller never launches without its template, so neither does doctor's check:
    before the stack made it, the same request names it as the stack will."""
    for mode in MODES:
        spec = _spec(mode, "none", "no-efa")
        ec2 = RecordingEc2()
        clouds = CloudClients(ec2=ec2, ssm=None, eks=None, iam=None)  # type: ignore[arg-type]
        settings = _settings()
        shape = parse_gang_shape(
            {c.POOL_LABEL: "train"},
            {c.ANN_INSTANCE_TYPE: "m5.large", c.ANN_COUNT: "2", c.ANN_MODE: mode},
            2,
            settings,
        )
        answers = LaunchCheck(clouds, None, settings, shape).launch_answers(
            spec, "atomic-gang-demo-train"
        )
        assert all(a.template_pending for a in answers)
        controller = _controller_requests(spec)
        named = {"LaunchTemplateName": "atomic-gang-demo-train", "Version": "$Latest"}
        for (_, ours), (_, theirs) in zip(ec2.sent, controller, strict=True):
            ours.pop("DryRun")
            if mode == c.MODE_FLEET:
                assert ours["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"] == named
                ours["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"] = theirs[
                    "LaunchTemplateConfigs"
                ][0]["LaunchTemplateSpecification"]
            else:
                assert ours["LaunchTemplate"] == named
                ours["LaunchTemplate"] = theirs["LaunchTemplate"]
            assert ours == theirs
