"""The EC2 emulator as the controller meets it: a server process, boto3 with endpoint_url.

The process is started and stopped by `EmulatorProcess` (see conftest_emulator); the last
test starts one of its own to show that stopping it leaves no process behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3.connection
from botocore.exceptions import ClientError

from devenv.emulator import (
    EmulatorClient,
    EmulatorControlError,
    EmulatorProcess,
    eks_ami_parameter_name,
)
from tests.support.ec2_listing import described_instances

pytestmark = pytest.mark.integration
# Loaded here until conftest.py wires these fixtures in; registering twice is a no-op.

TYPE = "trn1.32xlarge"
AZ = "us-east-1a"
NODE_ROLE = "arn:aws:iam::123456789012:role/atomic-gang-node"
# The `emulator_aws_client` fixture: make(service, retries=False) -> a boto3 client.
AwsClientFactory = Callable[..., Any]


def ami(aws: AwsClientFactory, arch: str = "x86_64", variant: str = "standard") -> str:
    name = eks_ami_parameter_name("1.36", arch, variant)
    return str(aws("ssm").get_parameter(Name=name)["Parameter"]["Value"])


def run(aws: AwsClientFactory, count: int, **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = aws("ec2").run_instances(
        ImageId=ami(aws),
        InstanceType=TYPE,
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": AZ},
        **extra,
    )
    return response


def fleet_request(aws: AwsClientFactory, subnet: str, count: int) -> dict[str, Any]:
    template = aws("ec2").create_launch_template(
        LaunchTemplateName=f"gang-{time.monotonic_ns()}",
        LaunchTemplateData={"ImageId": ami(aws, variant="neuron"), "InstanceType": TYPE},
    )["LaunchTemplate"]["LaunchTemplateId"]
    return {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": "on-demand",
        },
        "OnDemandOptions": {"MinTargetCapacity": count, "SingleAvailabilityZone": True},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                "Overrides": [{"SubnetId": subnet}],
            }
        ],
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": "atomic-gang.k8s.aws/pool", "Value": "p"}],
            }
        ],
    }


def fleet(aws: AwsClientFactory, subnet: str, count: int) -> dict[str, Any]:
    response: dict[str, Any] = aws("ec2").create_fleet(**fleet_request(aws, subnet, count))
    return response


def fleet_ids(response: dict[str, Any]) -> list[str]:
    return [iid for group in response["Instances"] for iid in group["InstanceIds"]]


def running(emulator: EmulatorClient) -> int:
    return int(emulator.state()["instances"].get("running", 0))


def subnet(emulator: EmulatorClient, az: str = AZ) -> str:
    return str(emulator.state()["regions"]["us-east-1"]["subnets"][az])


def test_same_client_token_twice_is_one_reservation(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    first = run(emulator_aws_client, 2, ClientToken="uid-gen-3")
    again = run(emulator_aws_client, 2, ClientToken="uid-gen-3")

    assert again["ReservationId"] == first["ReservationId"]
    assert {i["InstanceId"] for i in again["Instances"]} == {
        i["InstanceId"] for i in first["Instances"]
    }
    assert running(ec2_emulator) == 2


def test_fleet_asking_n_with_n_minus_one_free_gets_nothing(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.set_capacity(AZ, TYPE, 3)

    response = fleet(emulator_aws_client, subnet(ec2_emulator), 4)

    assert response["Instances"] == []
    assert [e["ErrorCode"] for e in response["Errors"]] == ["InsufficientInstanceCapacity"]
    assert running(ec2_emulator) == 0


def test_fleet_client_token_replays_the_answer(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    request = fleet_request(emulator_aws_client, subnet(ec2_emulator), 3)
    ec2 = emulator_aws_client("ec2")

    first = ec2.create_fleet(ClientToken="uid-gen-9", **request)
    again = ec2.create_fleet(ClientToken="uid-gen-9", **request)

    assert again["FleetId"] == first["FleetId"]
    assert fleet_ids(again) == fleet_ids(first)
    assert len(fleet_ids(first)) == 3
    assert running(ec2_emulator) == 3
    tags = ec2.describe_instances(InstanceIds=fleet_ids(first))["Reservations"][0]["Instances"][0]
    assert {"Key": "atomic-gang.k8s.aws/pool", "Value": "p"} in tags["Tags"]


def test_capacity_returns_after_termination(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.set_capacity(AZ, TYPE, 2)
    launched = [i["InstanceId"] for i in run(emulator_aws_client, 2)["Instances"]]
    with pytest.raises(ClientError) as short:
        run(emulator_aws_client, 1)
    assert short.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"

    emulator_aws_client("ec2").terminate_instances(InstanceIds=launched)

    assert len(run(emulator_aws_client, 2)["Instances"]) == 2


def test_injected_capacity_fault_fails_one_call_then_succeeds(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.inject_fault("RunInstances", "InsufficientInstanceCapacity", count=1)

    with pytest.raises(ClientError) as failed:
        run(emulator_aws_client, 2)

    assert failed.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert running(ec2_emulator) == 0
    assert len(run(emulator_aws_client, 2)["Instances"]) == 2


def test_throttling_fault_gives_request_limit_exceeded(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.inject_fault("CreateTags", "RequestLimitExceeded", count=1)
    instance_id = run(emulator_aws_client, 1)["Instances"][0]["InstanceId"]
    tag = [{"Key": "atomic-gang.k8s.aws/keep-warm-until", "Value": "2030-01-01T00:00:00Z"}]

    with pytest.raises(ClientError) as throttled:
        emulator_aws_client("ec2").create_tags(Resources=[instance_id], Tags=tag)

    assert throttled.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    # A retrying client rides through the next one.
    ec2_emulator.inject_fault("CreateTags", "RequestLimitExceeded", count=1)
    emulator_aws_client("ec2", retries=True).create_tags(Resources=[instance_id], Tags=tag)


def test_partial_fleet_switch_gives_n_minus_one(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.set_short_answer("CreateFleet", missing=1)

    response = fleet(emulator_aws_client, subnet(ec2_emulator), 4)

    assert len(fleet_ids(response)) == 3
    assert running(ec2_emulator) == 3
    assert ec2_emulator.state()["short_answers"] == []


def test_eni_detach_delay_is_observed(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    delay = 0.6
    ec2_emulator.set_eni_detach_delay(delay)
    ec2 = emulator_aws_client("ec2")
    instance_id = run(emulator_aws_client, 1)["Instances"][0]["InstanceId"]
    eni_id = ec2.create_network_interface(
        SubnetId=subnet(ec2_emulator), Description=f"aws-K8S-{instance_id}"
    )["NetworkInterface"]["NetworkInterfaceId"]
    ec2.attach_network_interface(NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=1)

    def status() -> str:
        found = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])
        return str(found["NetworkInterfaces"][0]["Status"])

    terminated_at = time.monotonic()
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert status() == "in-use"
    # Wall time is the behaviour under test here: poll until the detach lands.
    while status() == "in-use":
        assert time.monotonic() - terminated_at < delay + 5, "the ENI never detached"
        time.sleep(0.05)
    assert time.monotonic() - terminated_at >= delay


def test_eks_ami_parameter_resolves_to_an_ami_of_its_architecture(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    for arch in ("x86_64", "arm64"):
        image_id = ami(emulator_aws_client, arch, "nvidia")
        images = emulator_aws_client("ec2").describe_images(ImageIds=[image_id])["Images"]
        assert [i["Architecture"] for i in images] == [arch]


def test_eks_cluster_and_access_entry_crud(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    ec2_emulator.register_eks_cluster(
        "gang", endpoint="https://127.0.0.1:6443", service_ipv4_cidr="10.100.0.0/16"
    )
    eks = emulator_aws_client("eks")

    cluster = eks.describe_cluster(name="gang")["cluster"]
    eks.create_access_entry(
        clusterName="gang", principalArn=NODE_ROLE, type="EC2_LINUX", tags={"a": "b"}
    )
    entry = eks.describe_access_entry(clusterName="gang", principalArn=NODE_ROLE)["accessEntry"]
    listed = eks.list_access_entries(clusterName="gang")["accessEntries"]
    eks.delete_access_entry(clusterName="gang", principalArn=NODE_ROLE)

    assert (cluster["status"], cluster["endpoint"]) == ("ACTIVE", "https://127.0.0.1:6443")
    assert cluster["kubernetesNetworkConfig"]["serviceIpv4Cidr"] == "10.100.0.0/16"
    assert cluster["certificateAuthority"]["data"]
    assert subnet(ec2_emulator) in cluster["resourcesVpcConfig"]["subnetIds"]
    assert (entry["type"], entry["tags"]) == ("EC2_LINUX", {"a": "b"})
    assert listed == [NODE_ROLE]
    assert eks.list_access_entries(clusterName="gang")["accessEntries"] == []


def test_reset_clears_instances(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    run(emulator_aws_client, 3)
    ec2_emulator.set_capacity(AZ, TYPE, 1)
    assert running(ec2_emulator) == 3

    state = ec2_emulator.reset()

    assert state["instances"] == {}
    assert state["capacity"] == []
    assert described_instances(emulator_aws_client("ec2")) == []


def test_control_api_errors_name_the_field(ec2_emulator: EmulatorClient) -> None:
    with pytest.raises(EmulatorControlError) as bad_free:
        ec2_emulator.set_capacity(AZ, TYPE, -1)
    with pytest.raises(EmulatorControlError) as bad_action:
        ec2_emulator.inject_fault("run instances", "InternalError")

    assert (bad_free.value.status, bad_free.value.field) == (400, "free")
    assert (bad_action.value.status, bad_action.value.field) == (400, "action")


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    with EmulatorProcess(tmp_path) as process:
        pid = process.pid
        assert pid is not None
        assert process.client.health()
        assert process.log_path.exists()

    assert not process.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_connections_stay_open_between_calls(
    ec2_emulator: EmulatorClient, emulator_aws_client: AwsClientFactory
) -> None:
    # AWS keeps a client's connection open between calls; an emulator that closed it after
    # each answer made every call of every client pay a new connection (and the emulator a
    # thread), which no production client pays.
    ec2 = emulator_aws_client("ec2")
    s3 = emulator_aws_client("s3")
    s3.create_bucket(Bucket="keep-alive-check")
    opened: list[object] = []
    original = urllib3.connection.HTTPConnection.connect

    def counting(self: urllib3.connection.HTTPConnection) -> None:
        opened.append(self)
        original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(urllib3.connection.HTTPConnection, "connect", counting)
        for _ in range(5):
            ec2.describe_availability_zones()
            s3.head_bucket(Bucket="keep-alive-check")
    assert len(opened) <= 2, f"{len(opened)} connections for 10 calls on two clients"
