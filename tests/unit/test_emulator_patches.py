"""The EC2 emulator's behaviour, in-process: moto's mock plus `devenv.emulator.install()`.

Each test drives the emulator with boto3 exactly as the EC2 engine does and asserts what a
controller would see. Retries are off so that one injected fault is one failed call.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from devenv.emulator import (
    FLEET_ID_TAG,
    ClusterSpec,
    EmulatorInputError,
    EmulatorState,
    FleetSlot,
    eks_ami_parameter_name,
    install,
    plan_fleet,
)
from tests.support.clocks import SecondsClock
from tests.support.ec2_listing import described_instances
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
TYPE = "p5.48xlarge"
NO_RETRIES = Config(retries={"total_max_attempts": 1})
NODE_ROLE = "arn:aws:iam::123456789012:role/gang/atomic-gang-node"
# One session for the module: it keeps the loaded service models, which moto's mock would
# otherwise make every test load again through a fresh default session.
SESSION = boto3.session.Session(region_name=REGION)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch) as state:
        yield state


def client(service: str) -> Any:
    return SESSION.client(service, config=NO_RETRIES)


def ami(arch: str = "x86_64") -> str:
    name = eks_ami_parameter_name("1.36", arch, "standard")
    return str(client("ssm").get_parameter(Name=name)["Parameter"]["Value"])


def launch_template(instance_type: str = TYPE) -> str:
    created = client("ec2").create_launch_template(
        LaunchTemplateName=f"gang-{instance_type}",
        LaunchTemplateData={"ImageId": ami(), "InstanceType": instance_type},
    )
    return str(created["LaunchTemplate"]["LaunchTemplateId"])


def fleet_request(template_id: str, subnets: list[str], count: int, **extra: Any) -> dict[str, Any]:
    return {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": "on-demand",
        },
        "OnDemandOptions": {"MinTargetCapacity": count, "SingleAvailabilityZone": True},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template_id,
                    "Version": "$Latest",
                },
                "Overrides": [{"SubnetId": s, "Priority": float(i)} for i, s in enumerate(subnets)],
            }
        ],
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": "atomic-gang.k8s.aws/pool", "Value": "p"}],
            },
            {"ResourceType": "fleet", "Tags": [{"Key": "fleet-tag", "Value": "f"}]},
        ],
        **extra,
    }


def fleet_ids(response: dict[str, Any]) -> list[str]:
    return [iid for group in response["Instances"] for iid in group["InstanceIds"]]


def live_instances() -> list[dict[str, Any]]:
    return described_instances(
        client("ec2"), [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )


def run(count: int, az: str = "us-east-1a", **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = client("ec2").run_instances(
        ImageId=ami(),
        InstanceType=TYPE,
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": az},
        **extra,
    )
    return response


# --- ClientToken idempotency ---------------------------------------------------------------
def test_same_client_token_twice_returns_one_reservation(emulator: EmulatorState) -> None:
    first = run(3, ClientToken="pool-uid-gen-1")
    again = run(3, ClientToken="pool-uid-gen-1")

    assert again["ReservationId"] == first["ReservationId"]
    assert [i["InstanceId"] for i in again["Instances"]] == [
        i["InstanceId"] for i in first["Instances"]
    ]
    assert len(live_instances()) == 3


def test_same_client_token_with_other_parameters_is_refused(emulator: EmulatorState) -> None:
    run(2, ClientToken="tok")

    with pytest.raises(ClientError) as refused:
        run(3, ClientToken="tok")

    assert refused.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    assert len(live_instances()) == 2


# --- capacity model --------------------------------------------------------------------------
def test_run_instances_short_of_min_count_launches_nothing(emulator: EmulatorState) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 3)

    with pytest.raises(ClientError) as short:
        run(4)

    error = short.value.response["Error"]
    assert error["Code"] == "InsufficientInstanceCapacity"
    assert f"sufficient {TYPE} capacity" in error["Message"]
    assert "(us-east-1a)" in error["Message"]
    assert "us-east-1b" in error["Message"]  # still unlimited, so offered instead
    assert live_instances() == []


def test_run_instances_launches_up_to_max_count_within_capacity(emulator: EmulatorState) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 3)

    response = client("ec2").run_instances(
        ImageId=ami(),
        InstanceType=TYPE,
        MinCount=2,
        MaxCount=5,
        SubnetId=emulator.subnets()["us-east-1a"],
    )

    assert len(response["Instances"]) == 3
    assert {i["Placement"]["AvailabilityZone"] for i in live_instances()} == {"us-east-1a"}


def test_capacity_returns_after_termination(emulator: EmulatorState) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 2)
    launched = [i["InstanceId"] for i in run(2)["Instances"]]
    with pytest.raises(ClientError):
        run(1)

    client("ec2").terminate_instances(InstanceIds=launched[:1])

    assert len(run(1)["Instances"]) == 1
    pool = next(row for row in emulator.snapshot()["capacity"] if row["az"] == "us-east-1a")
    assert (pool["free"], pool["occupied"]) == (0, 2)


# --- instant fleets ------------------------------------------------------------------------
def test_fleet_asking_n_with_n_minus_one_free_launches_nothing(emulator: EmulatorState) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 3)
    subnet = emulator.subnets()["us-east-1a"]

    response = client("ec2").create_fleet(**fleet_request(launch_template(), [subnet], 4))

    assert response["Instances"] == []
    assert response["Errors"]
    error = response["Errors"][0]
    assert error["ErrorCode"] == "InsufficientInstanceCapacity"
    assert error["Lifecycle"] == "on-demand"
    assert error["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == subnet
    assert live_instances() == []


def test_fleet_puts_all_n_in_the_one_az_that_fits(emulator: EmulatorState) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 3)
    emulator.set_capacity("us-east-1b", TYPE, 4)
    subnets = emulator.subnets()

    response = client("ec2").create_fleet(
        **fleet_request(launch_template(), [subnets["us-east-1a"], subnets["us-east-1b"]], 4)
    )

    assert len(fleet_ids(response)) == 4
    assert response["Errors"] == []
    assert len(response["Instances"]) == 1  # ids grouped per override, as EC2 answers
    assert (
        response["Instances"][0]["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"]
        == (subnets["us-east-1b"])
    )
    instances = live_instances()
    assert {i["Placement"]["AvailabilityZone"] for i in instances} == {"us-east-1b"}
    for instance in instances:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags["atomic-gang.k8s.aws/pool"] == "p"
        assert tags[FLEET_ID_TAG] == response["FleetId"]
        assert "fleet-tag" not in tags
    fleet = client("ec2").describe_fleets(FleetIds=[response["FleetId"]])["Fleets"][0]
    assert {"Key": "fleet-tag", "Value": "f"} in fleet["Tags"]


def test_fleet_with_a_seen_client_token_returns_the_same_answer(emulator: EmulatorState) -> None:
    request = fleet_request(launch_template(), [emulator.subnets()["us-east-1a"]], 3)

    first = client("ec2").create_fleet(ClientToken="pool-uid-gen-7", **request)
    again = client("ec2").create_fleet(ClientToken="pool-uid-gen-7", **request)

    assert again["FleetId"] == first["FleetId"]
    assert fleet_ids(again) == fleet_ids(first)
    assert len(live_instances()) == 3


def test_a_replayed_token_returns_the_original_instances_even_once_terminated(
    emulator: EmulatorState,
) -> None:
    """ "Ensuring idempotency in Amazon EC2 API requests": the same response for each
    repeated request; only the instances' state may differ."""
    first = run(2, ClientToken="gone-since")
    ids = [i["InstanceId"] for i in first["Instances"]]
    client("ec2").terminate_instances(InstanceIds=ids)

    again = run(2, ClientToken="gone-since")

    assert again["ReservationId"] == first["ReservationId"]
    assert [i["InstanceId"] for i in again["Instances"]] == ids
    # The page says only that the state "might" differ: the product reads the state with
    # DescribeInstances, never from the replay's answer.
    assert live_instances() == []


def test_a_replayed_fleet_token_returns_the_original_instances_even_once_terminated(
    emulator: EmulatorState,
) -> None:
    request = fleet_request(launch_template(), [emulator.subnets()["us-east-1a"]], 2)
    first = client("ec2").create_fleet(ClientToken="fleet-gone-since", **request)
    client("ec2").terminate_instances(InstanceIds=fleet_ids(first))

    again = client("ec2").create_fleet(ClientToken="fleet-gone-since", **request)

    assert again["FleetId"] == first["FleetId"] and fleet_ids(again) == fleet_ids(first)
    assert live_instances() == []


def test_a_fleet_token_with_other_parameters_is_refused(emulator: EmulatorState) -> None:
    subnet = emulator.subnets()["us-east-1a"]
    lt = launch_template()
    client("ec2").create_fleet(ClientToken="fleet-tok", **fleet_request(lt, [subnet], 2))

    with pytest.raises(ClientError) as refused:
        client("ec2").create_fleet(ClientToken="fleet-tok", **fleet_request(lt, [subnet], 3))

    assert refused.value.response["Error"]["Code"] == "IdempotentParameterMismatch"
    assert len(live_instances()) == 2


def test_fleet_without_min_target_takes_what_fits_and_reports_the_rest(
    emulator: EmulatorState,
) -> None:
    emulator.set_capacity("us-east-1a", TYPE, 2)
    request = fleet_request(launch_template(), [emulator.subnets()["us-east-1a"]], 4)
    del request["OnDemandOptions"]

    response = client("ec2").create_fleet(**request)

    assert len(fleet_ids(response)) == 2
    assert [e["ErrorCode"] for e in response["Errors"]] == ["InsufficientInstanceCapacity"]


def test_fleet_min_target_needs_single_az_or_single_type(emulator: EmulatorState) -> None:
    request = fleet_request(launch_template(), [emulator.subnets()["us-east-1a"]], 2)
    request["OnDemandOptions"] = {"MinTargetCapacity": 2}

    with pytest.raises(ClientError) as refused:
        client("ec2").create_fleet(**request)

    assert refused.value.response["Error"]["Code"] == "InvalidParameterCombination"


@pytest.mark.parametrize(
    ("free", "single_az", "expected"),
    [
        ({("a", "t"): 2, ("b", "t"): 2}, False, {0: 2, 1: 2}),  # spread over both
        ({("a", "t"): 2, ("b", "t"): 4}, True, {1: 4}),  # one AZ: the one that fits
        ({("a", "t"): 2, ("b", "t"): 3}, True, {1: 3}),  # none fits: the best one
        ({("a", "t"): 0, ("b", "t"): 0}, True, {}),
    ],
)
def test_plan_fleet(
    free: dict[tuple[str, str], int], single_az: bool, expected: dict[int, int]
) -> None:
    slots = [FleetSlot(0, "a", "t", 0.0), FleetSlot(1, "b", "t", 1.0)]

    plan = plan_fleet(slots, 4, single_az=single_az, single_type=False, free=free)

    assert {k: v for k, v in plan.items() if v} == expected


# --- fault switches ------------------------------------------------------------------------
def test_injected_capacity_fault_fails_one_call_and_the_next_succeeds(
    emulator: EmulatorState,
) -> None:
    emulator.inject_fault("RunInstances", "InsufficientInstanceCapacity", count=1)

    with pytest.raises(ClientError) as failed:
        run(2)
    assert failed.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert live_instances() == []

    assert len(run(2)["Instances"]) == 2
    assert emulator.snapshot()["faults"] == []


def test_throttling_fault_answers_request_limit_exceeded(emulator: EmulatorState) -> None:
    emulator.inject_fault("DescribeInstances", "RequestLimitExceeded", count=2)

    for _ in range(2):
        with pytest.raises(ClientError) as throttled:
            client("ec2").describe_instances()
        assert throttled.value.response["Error"]["Code"] == "RequestLimitExceeded"
        assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503

    assert described_instances(client("ec2")) == []


def test_internal_error_fault_is_a_500(emulator: EmulatorState) -> None:
    emulator.inject_fault("TerminateInstances", "InternalError")
    launched = [i["InstanceId"] for i in run(1)["Instances"]]

    with pytest.raises(ClientError) as failed:
        client("ec2").terminate_instances(InstanceIds=launched)

    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert len(live_instances()) == 1


def test_short_run_instances_answers_success_with_fewer_than_min_count(
    emulator: EmulatorState,
) -> None:
    emulator.set_short_answer("RunInstances", missing=2, count=1)

    short = run(4)
    full = run(4)

    assert len(short["Instances"]) == 2
    assert len(full["Instances"]) == 4
    assert len(live_instances()) == 6
    assert [c["switch"] for c in emulator.consumed()] == ["short-answer"]


def test_short_answer_never_answers_empty(emulator: EmulatorState) -> None:
    emulator.set_short_answer("RunInstances", missing=9)

    assert len(run(2)["Instances"]) == 1


def test_partial_fleet_switch_returns_n_minus_one(emulator: EmulatorState) -> None:
    emulator.set_short_answer("CreateFleet", missing=1)
    request = fleet_request(launch_template(), [emulator.subnets()["us-east-1a"]], 4)

    short = client("ec2").create_fleet(**request)
    full = client("ec2").create_fleet(**request)

    assert len(fleet_ids(short)) == 3
    assert len(fleet_ids(full)) == 4
    assert len(live_instances()) == 7


def test_switches_refuse_unusable_values(emulator: EmulatorState) -> None:
    with pytest.raises(EmulatorInputError) as bad_az:
        emulator.set_capacity("moon-1", TYPE, 1)
    with pytest.raises(EmulatorInputError) as unknown_az:
        emulator.set_capacity("us-east-1z", TYPE, 1)
    with pytest.raises(EmulatorInputError) as bad_count:
        emulator.inject_fault("RunInstances", "InternalError", count=0)
    with pytest.raises(EmulatorInputError) as bad_action:
        emulator.set_short_answer("TerminateInstances", missing=1)

    assert bad_az.value.field == unknown_az.value.field == "az"
    assert bad_count.value.field == "count"
    assert bad_action.value.field == "action"


# --- ENIs ------------------------------------------------------------------------------------
def test_kept_eni_stays_attached_for_the_detach_delay(emulator: EmulatorState) -> None:
    clock = SecondsClock()
    emulator.clock = clock
    emulator.set_eni_detach_delay(30)
    ec2 = client("ec2")
    subnet = emulator.subnets()["us-east-1a"]
    instance_id = run(1)["Instances"][0]["InstanceId"]
    eni = ec2.create_network_interface(SubnetId=subnet, Description=f"aws-K8S-{instance_id}")
    eni_id = eni["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=1)

    def status() -> str:
        found = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])
        return str(found["NetworkInterfaces"][0]["Status"])

    ec2.terminate_instances(InstanceIds=[instance_id])
    assert status() == "in-use"
    clock.now += 29.9
    assert status() == "in-use"
    clock.now += 0.1
    assert status() == "available"
    # The primary ENI was made at launch, so it went with the instance.
    left = ec2.describe_network_interfaces(Filters=[{"Name": "subnet-id", "Values": [subnet]}])[
        "NetworkInterfaces"
    ]
    assert [e["NetworkInterfaceId"] for e in left] == [eni_id]


# --- SSM AMI parameters --------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_eks_ami_parameter_resolves_to_an_existing_ami(emulator: EmulatorState, arch: str) -> None:
    image_id = ami(arch)

    image = client("ec2").describe_images(ImageIds=[image_id])["Images"][0]

    assert image["Architecture"] == arch
    assert image["State"] == "available"


def test_get_parameters_answers_every_supported_version(emulator: EmulatorState) -> None:
    names = [eks_ami_parameter_name(f"1.{minor}", "x86_64", "nvidia") for minor in range(30, 37)]

    found = client("ssm").get_parameters(Names=names)

    assert found["InvalidParameters"] == []
    assert sorted(p["Name"] for p in found["Parameters"]) == sorted(names)


# --- EKS -----------------------------------------------------------------------------------
def test_registered_cluster_is_described(emulator: EmulatorState) -> None:
    emulator.register_eks_cluster(
        ClusterSpec(name="gpu", endpoint="https://127.0.0.1:6443", service_ipv4_cidr="10.96.0.0/12")
    )

    cluster = client("eks").describe_cluster(name="gpu")["cluster"]

    assert cluster["status"] == "ACTIVE"
    assert cluster["endpoint"] == "https://127.0.0.1:6443"
    assert cluster["version"] == "1.36"
    assert cluster["kubernetesNetworkConfig"]["serviceIpv4Cidr"] == "10.96.0.0/12"
    pem = base64.b64decode(cluster["certificateAuthority"]["data"])
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert sorted(cluster["resourcesVpcConfig"]["subnetIds"]) == sorted(emulator.subnets().values())


def test_access_entry_crud(emulator: EmulatorState) -> None:
    emulator.register_eks_cluster(ClusterSpec(name="gpu"))
    eks = client("eks")

    created = eks.create_access_entry(clusterName="gpu", principalArn=NODE_ROLE, type="EC2_LINUX")
    described = eks.describe_access_entry(clusterName="gpu", principalArn=NODE_ROLE)
    listed = eks.list_access_entries(clusterName="gpu")["accessEntries"]
    with pytest.raises(ClientError) as duplicate:
        eks.create_access_entry(clusterName="gpu", principalArn=NODE_ROLE, type="EC2_LINUX")
    eks.delete_access_entry(clusterName="gpu", principalArn=NODE_ROLE)

    assert created["accessEntry"]["type"] == "EC2_LINUX"
    assert described["accessEntry"]["username"] == "system:node:{{EC2PrivateDNSName}}"
    assert described["accessEntry"]["principalArn"] == NODE_ROLE
    assert listed == [NODE_ROLE]
    assert duplicate.value.response["Error"]["Code"] == "ResourceInUseException"
    assert eks.list_access_entries(clusterName="gpu")["accessEntries"] == []
    with pytest.raises(ClientError) as gone:
        eks.describe_access_entry(clusterName="gpu", principalArn=NODE_ROLE)
    assert gone.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_pod_identity_association_crud(emulator: EmulatorState) -> None:
    emulator.register_eks_cluster(ClusterSpec(name="gpu"))
    eks = client("eks")
    role = "arn:aws:iam::123456789012:role/atomic-gang-controller"

    created = eks.create_pod_identity_association(
        clusterName="gpu", namespace="atomic-gang", serviceAccount="controller", roleArn=role
    )["association"]
    listed = eks.list_pod_identity_associations(clusterName="gpu", namespace="atomic-gang")
    described = eks.describe_pod_identity_association(
        clusterName="gpu", associationId=created["associationId"]
    )
    eks.delete_pod_identity_association(clusterName="gpu", associationId=created["associationId"])

    assert [a["associationId"] for a in listed["associations"]] == [created["associationId"]]
    assert described["association"]["roleArn"] == role
    assert eks.list_pod_identity_associations(clusterName="gpu")["associations"] == []


# --- seed and reset --------------------------------------------------------------------------
def test_every_az_has_a_default_subnet(emulator: EmulatorState) -> None:
    subnets = emulator.subnets()
    zones = client("ec2").describe_availability_zones()["AvailabilityZones"]

    assert set(subnets) == {z["ZoneName"] for z in zones}
    described = client("ec2").describe_subnets(SubnetIds=list(subnets.values()))["Subnets"]
    assert {s["SubnetId"]: s["AvailabilityZone"] for s in described} == {
        v: k for k, v in subnets.items()
    }


def test_reset_clears_instances_and_switches(emulator: EmulatorState) -> None:
    run(2, ClientToken="before-reset")
    emulator.set_capacity("us-east-1a", TYPE, 5)
    emulator.inject_fault("CreateTags", "Unsupported")

    emulator.reset()

    state = emulator.snapshot()
    assert state["instances"] == {}
    assert state["capacity"] == []
    assert state["faults"] == []
    assert live_instances() == []
    assert len(run(2, ClientToken="before-reset")["Instances"]) == 2
    assert client("ssm").get_parameter(Name=eks_ami_parameter_name("1.36", "arm64", "standard"))


def test_terminating_a_terminated_instance_succeeds_as_on_aws() -> None:
    import boto3

    from devenv.emulator import EMULATOR

    with mock_aws():
        install()
        EMULATOR.reset_switches()
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        launched = ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1)
        iid = launched["Instances"][0]["InstanceId"]
        ec2.terminate_instances(InstanceIds=[iid])
        again = ec2.terminate_instances(InstanceIds=[iid])["TerminatingInstances"][0]
        assert again["PreviousState"]["Name"] == "terminated"
        state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] == "terminated"


def test_tags_read_per_resource_answer_as_moto_did(emulator: EmulatorState) -> None:
    """P7 reads one resource's entry of the tag table instead of scanning it: the answers
    a controller sees (tags in DescribeInstances, tag filters, DescribeTags) are unchanged."""
    ec2 = client("ec2")
    tagged = run(2)["Instances"]
    untagged = run(1)["Instances"][0]["InstanceId"]
    first, second = (i["InstanceId"] for i in tagged)
    ec2.create_tags(Resources=[first], Tags=[{"Key": "team", "Value": "a"}])
    ec2.create_tags(Resources=[second], Tags=[{"Key": "team", "Value": "b"}])
    ec2.delete_tags(Resources=[second], Tags=[{"Key": "team"}])

    found = described_instances(ec2, [{"Name": "tag:team", "Values": ["a"]}])
    assert [i["InstanceId"] for i in found] == [first]
    by_id = {i["InstanceId"]: i for i in live_instances()}
    assert {t["Key"]: t["Value"] for t in by_id[first]["Tags"]}["team"] == "a"
    assert "team" not in {t["Key"] for t in by_id[second].get("Tags", [])}
    assert not by_id[untagged].get("Tags")
    described = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [first]}])["Tags"]
    assert {(t["Key"], t["Value"], t["ResourceType"]) for t in described} >= {
        ("team", "a", "instance")
    }
    # Reading the tags of an untagged instance leaves no empty entry behind.
    assert untagged not in ec2_backends[DEFAULT_ACCOUNT_ID][REGION].tags


def test_listing_lag_hides_fresh_launches_from_listings_only(emulator: EmulatorState) -> None:
    clock = SecondsClock()
    emulator.clock = clock
    emulator.set_listing_lag(5)
    ids = [i["InstanceId"] for i in run(2)["Instances"]]

    assert live_instances() == []
    by_id = client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    assert sorted(i["InstanceId"] for r in by_id for i in r["Instances"]) == sorted(ids)
    clock.now += 5.1
    assert sorted(i["InstanceId"] for i in live_instances()) == sorted(ids)
