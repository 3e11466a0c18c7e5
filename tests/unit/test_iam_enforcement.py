"""The controller's generated policy, evaluated: its credentials (a role holding exactly
`controller_policy(cluster_name="demo")`, assumed through STS) call the emulator, which
evaluates Action, Resource and Condition on every call (`devenv.emulator.authorization`).
Each case is one thing the controller is refused, or allowed, on this cluster's resources
and on others'. The resources are made with the product's own tags and requests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devenv.emulator import EmulatorState
from devenv.emulator.launch_contexts import set_template_tags_are_request_tags
from provisioner.api import constants as c
from provisioner.cloud.iam_policy import VPC_CNI_CLUSTER_TAG, controller_policy
from provisioner.cloud.tags import (
    FLEET_RESOURCE_TYPES,
    RUNINSTANCES_RESOURCE_TYPES,
    tag_specifications,
)
from stacks.launch_template import launch_template_request
from stacks.placement_group import placement_group_request
from stacks.spec import pool_tags
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ACCOUNT = "123456789012"
CLUSTER = "demo"
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/nodes"
NO_RETRIES = Config(retries={"total_max_attempts": 1})


def _client(service: str, keys: dict[str, str]) -> Any:
    return boto3.client(service, region_name=REGION, config=NO_RETRIES, **keys)


ROOT = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch) as state:
        yield state


@pytest.fixture
def controller(emulator: EmulatorState) -> Callable[[str], Any]:
    """Clients with the controller's credentials: the role and policy the bootstrap makes."""
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
    role = iam.create_role(RoleName="controller", AssumeRolePolicyDocument=json.dumps(trust))
    policy = controller_policy(
        account_id=ACCOUNT, region=REGION, node_role_arns=[NODE_ROLE], cluster_name=CLUSTER
    )
    iam.put_role_policy(
        RoleName="controller", PolicyName="controller", PolicyDocument=json.dumps(policy)
    )
    creds = _client("sts", ROOT).assume_role(
        RoleArn=role["Role"]["Arn"], RoleSessionName="controller"
    )["Credentials"]
    keys = {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }
    return lambda service: _client(service, keys)


def root(service: str) -> Any:
    return _client(service, ROOT)


def _ami() -> str:
    return str(root("ec2").describe_images()["Images"][0]["ImageId"])


def _gang_tags(cluster: str = CLUSTER) -> dict[str, str]:
    return {**pool_tags(cluster, "train", timedelta(hours=4)), c.TAG_GROUP: "g-1"}


def _launch(ec2: Any, tags: dict[str, str] | None) -> str:
    extra = (
        {"TagSpecifications": tag_specifications(tags, RUNINSTANCES_RESOURCE_TYPES)} if tags else {}
    )
    made = ec2.run_instances(
        ImageId=_ami(), InstanceType="m5.large", MinCount=1, MaxCount=1, **extra
    )
    return str(made["Instances"][0]["InstanceId"])


def _launch_own(
    controller: Callable[[str], Any], tags: dict[str, str] | None, template: str | None = None
) -> str:
    """A launch with the controller's credentials from its own pool template, as it launches
    (its policy allows no launch without one of this cluster's templates)."""
    extra = (
        {"TagSpecifications": tag_specifications(tags, RUNINSTANCES_RESOURCE_TYPES)} if tags else {}
    )
    made = controller("ec2").run_instances(
        LaunchTemplate={"LaunchTemplateId": template or _own_template(controller)},
        MinCount=1,
        MaxCount=1,
        **extra,
    )
    return str(made["Instances"][0]["InstanceId"])


def _refused(call: Callable[[], Any], code: str = "UnauthorizedOperation") -> str:
    with pytest.raises(ClientError) as err:
        call()
    assert err.value.response["Error"]["Code"] == code
    return str(err.value.response["Error"]["Message"])


def _keep_warm(ec2: Any, instance_id: str) -> Any:
    return ec2.create_tags(
        Resources=[instance_id],
        Tags=[{"Key": c.TAG_KEEP_WARM_UNTIL, "Value": "2030-01-01T00:00:00Z"}],
    )


def _state(instance_id: str) -> str:
    found = root("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(found[0]["Instances"][0]["State"]["Name"])


def _tags_of(resource_id: str) -> dict[str, str]:
    found = root("ec2").describe_tags(Filters=[{"Name": "resource-id", "Values": [resource_id]}])
    return {t["Key"]: t["Value"] for t in found["Tags"]}


# --- refused ---------------------------------------------------------------------------------
def test_refused_to_tag_an_untagged_instance(controller: Callable[[str], Any]) -> None:
    stranger = _launch(root("ec2"), None)
    message = _refused(lambda: _keep_warm(controller("ec2"), stranger))
    assert f"ec2:CreateTags on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{stranger}" in (
        message
    )
    assert _tags_of(stranger) == {}


def test_refused_to_claim_an_untagged_instance_by_tagging_it_as_this_clusters(
    controller: Callable[[str], Any],
) -> None:
    stranger = _launch(root("ec2"), None)
    claim = [{"Key": k, "Value": v} for k, v in _gang_tags().items()]
    _refused(lambda: controller("ec2").create_tags(Resources=[stranger], Tags=claim))
    assert _tags_of(stranger) == {}


def test_refused_to_terminate_an_untagged_instance(controller: Callable[[str], Any]) -> None:
    stranger = _launch(root("ec2"), None)
    _refused(lambda: controller("ec2").terminate_instances(InstanceIds=[stranger]))
    assert _state(stranger) == "running"


def test_refused_to_terminate_another_clusters_gang_instance(
    controller: Callable[[str], Any],
) -> None:
    theirs = _launch(root("ec2"), _gang_tags("other-cluster"))
    _refused(lambda: controller("ec2").terminate_instances(InstanceIds=[theirs]))
    assert _state(theirs) == "running"


def test_refused_to_tag_another_clusters_gang_instance(controller: Callable[[str], Any]) -> None:
    theirs = _launch(root("ec2"), _gang_tags("other-cluster"))
    _refused(lambda: _keep_warm(controller("ec2"), theirs))
    move = [{"Key": c.TAG_CLUSTER, "Value": CLUSTER}]
    _refused(lambda: controller("ec2").create_tags(Resources=[theirs], Tags=move))
    assert _tags_of(theirs)[c.TAG_CLUSTER] == "other-cluster"


def test_refused_to_change_an_own_instances_ownership_tags(
    controller: Callable[[str], Any],
) -> None:
    mine = _launch_own(controller, _gang_tags())
    for key, value in ((c.TAG_POOL, "another-pool"), (c.TAG_CLUSTER, "x"), (c.TAG_MANAGED, "no")):
        tag = [{"Key": key, "Value": value}]
        _refused(lambda tag=tag: controller("ec2").create_tags(Resources=[mine], Tags=tag))  # type: ignore[misc]
    both = [
        {"Key": c.TAG_KEEP_WARM_UNTIL, "Value": ""},
        {"Key": c.TAG_POOL, "Value": "another-pool"},
    ]
    _refused(lambda: controller("ec2").create_tags(Resources=[mine], Tags=both))
    assert _tags_of(mine)[c.TAG_POOL] == "train"


def test_refused_to_launch_for_another_cluster_or_untagged(
    controller: Callable[[str], Any],
) -> None:
    mine = _own_template(controller)
    _refused(lambda: _launch_own(controller, _gang_tags("other-cluster"), mine))
    # From this cluster's template an untagged request takes the template's tags, which
    # name this cluster; without one, an untagged launch is refused.
    _refused(lambda: _launch(controller("ec2"), None))
    assert root("ec2").describe_instances()["Reservations"] == []


def _team_template() -> str:
    made = root("ec2").create_launch_template(
        LaunchTemplateName="team-b",
        LaunchTemplateData={"ImageId": _ami(), "InstanceType": "m5.large"},
        TagSpecifications=[
            {"ResourceType": "launch-template", "Tags": [{"Key": "team", "Value": "b"}]}
        ],
    )
    return str(made["LaunchTemplate"]["LaunchTemplateId"])


def test_refused_to_delete_or_change_another_teams_launch_template(
    controller: Callable[[str], Any],
) -> None:
    theirs = _team_template()
    ec2 = controller("ec2")
    _refused(lambda: ec2.delete_launch_template(LaunchTemplateId=theirs))
    _refused(
        lambda: ec2.create_launch_template_version(
            LaunchTemplateId=theirs, LaunchTemplateData={"ImageId": _ami()}
        )
    )
    _refused(lambda: ec2.modify_launch_template(LaunchTemplateId=theirs, DefaultVersion="1"))
    found = root("ec2").describe_launch_templates(LaunchTemplateIds=[theirs])["LaunchTemplates"]
    assert found[0]["LatestVersionNumber"] == 1


def test_refused_to_launch_from_another_teams_launch_template(
    controller: Callable[[str], Any],
) -> None:
    theirs = _team_template()
    _refused(
        lambda: controller("ec2").run_instances(
            LaunchTemplate={"LaunchTemplateId": theirs},
            MinCount=1,
            MaxCount=1,
            TagSpecifications=tag_specifications(_gang_tags(), RUNINSTANCES_RESOURCE_TYPES),
        )
    )


def test_refused_to_create_a_launch_template_without_this_clusters_tags(
    controller: Callable[[str], Any],
) -> None:
    data = {"ImageId": _ami(), "InstanceType": "m5.large"}
    _refused(
        lambda: controller("ec2").create_launch_template(
            LaunchTemplateName="untagged", LaunchTemplateData=data
        )
    )


def test_refused_to_delete_another_teams_placement_group(
    controller: Callable[[str], Any],
) -> None:
    root("ec2").create_placement_group(
        GroupName="team-b",
        Strategy="cluster",
        TagSpecifications=[
            {"ResourceType": "placement-group", "Tags": [{"Key": "team", "Value": "b"}]}
        ],
    )
    _refused(lambda: controller("ec2").delete_placement_group(GroupName="team-b"))
    _refused(
        lambda: controller("ec2").create_placement_group(
            **placement_group_request(
                {"name": "theirs", "tags": pool_tags("other-cluster", "p", timedelta(hours=1))}
            )
        )
    )
    assert len(root("ec2").describe_placement_groups()["PlacementGroups"]) == 1


def _eni(cni_cluster: str | None) -> str:
    ec2 = root("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    tags = (
        {
            "TagSpecifications": [
                {
                    "ResourceType": "network-interface",
                    "Tags": [{"Key": VPC_CNI_CLUSTER_TAG, "Value": cni_cluster}],
                }
            ]
        }
        if cni_cluster
        else {}
    )
    made = ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0", **tags)
    return str(made["NetworkInterface"]["NetworkInterfaceId"])


def test_refused_to_delete_an_eni_the_vpc_cni_made_for_another_cluster_or_untagged(
    controller: Callable[[str], Any],
) -> None:
    for eni in (_eni("other-cluster"), _eni(None)):
        _refused(lambda eni=eni: controller("ec2").delete_network_interface(NetworkInterfaceId=eni))  # type: ignore[misc]
    assert len(root("ec2").describe_network_interfaces()["NetworkInterfaces"]) == 2


def test_refused_an_ssm_parameter_outside_the_eks_ami_path(
    controller: Callable[[str], Any],
) -> None:
    root("ssm").put_parameter(Name="/team-b/db-password", Value="s3cret", Type="String")
    _refused(
        lambda: controller("ssm").get_parameter(Name="/team-b/db-password"),
        "AccessDeniedException",
    )
    _refused(
        lambda: controller("ssm").get_parameter(Name="/aws/service/ami-amazon-linux-latest/x"),
        "AccessDeniedException",
    )


# --- allowed ---------------------------------------------------------------------------------
def test_allowed_to_launch_with_this_clusters_tags(controller: Callable[[str], Any]) -> None:
    mine = _launch_own(controller, _gang_tags())
    assert _tags_of(mine)[c.TAG_CLUSTER] == CLUSTER


def test_allowed_keep_warm_retag_and_terminate_of_its_own_instance(
    controller: Callable[[str], Any],
) -> None:
    mine = _launch_own(controller, _gang_tags())
    _keep_warm(controller("ec2"), mine)
    assert _tags_of(mine)[c.TAG_KEEP_WARM_UNTIL] == "2030-01-01T00:00:00Z"
    controller("ec2").terminate_instances(InstanceIds=[mine])
    assert _state(mine) in ("shutting-down", "terminated")


def _own_template(controller: Callable[[str], Any]) -> str:
    props = {
        "name": "agp-demo-train",
        "image_id": _ami(),
        "instance_type": "m5.large",
        "user_data": "#!/bin/true",
        "tags": pool_tags(CLUSTER, "train", timedelta(hours=4)),
    }
    made = controller("ec2").create_launch_template(**launch_template_request(props))
    return str(made["LaunchTemplate"]["LaunchTemplateId"])


def test_allowed_to_create_version_and_delete_its_own_launch_template(
    controller: Callable[[str], Any],
) -> None:
    mine = _own_template(controller)
    ec2 = controller("ec2")
    ec2.create_launch_template_version(
        LaunchTemplateId=mine, LaunchTemplateData={"ImageId": _ami()}
    )
    ec2.modify_launch_template(LaunchTemplateId=mine, DefaultVersion="2")
    ec2.delete_launch_template(LaunchTemplateId=mine)
    assert root("ec2").describe_launch_templates()["LaunchTemplates"] == []


@pytest.mark.parametrize("template_tags_count", [True, False])
def test_allowed_an_instant_fleet_from_its_own_template(
    controller: Callable[[str], Any], template_tags_count: bool
) -> None:
    # Whether the template's volume/ENI tags are request tags is not settled by the pages:
    # the product's fleet passes under either answer.
    set_template_tags_are_request_tags(template_tags_count)
    try:
        _fleet_from_own_template(controller)
    finally:
        set_template_tags_are_request_tags(True)


def _fleet_from_own_template(controller: Callable[[str], Any]) -> None:
    mine = _own_template(controller)
    subnet = root("ec2").describe_subnets()["Subnets"][0]["SubnetId"]
    made = controller("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "on-demand",
        },
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": mine, "Version": "$Latest"},
                "Overrides": [{"SubnetId": subnet}],
            }
        ],
        TagSpecifications=tag_specifications(_gang_tags(), FLEET_RESOURCE_TYPES),
    )
    assert made["Instances"][0]["InstanceIds"]


def test_allowed_to_create_and_delete_its_own_placement_group(
    controller: Callable[[str], Any],
) -> None:
    request = placement_group_request(
        {"name": "agp-demo-train", "tags": pool_tags(CLUSTER, "train", timedelta(hours=1))}
    )
    controller("ec2").create_placement_group(**request)
    controller("ec2").delete_placement_group(GroupName="agp-demo-train")
    assert root("ec2").describe_placement_groups()["PlacementGroups"] == []


def test_allowed_to_delete_an_eni_the_vpc_cni_made_for_this_cluster(
    controller: Callable[[str], Any],
) -> None:
    eni = _eni(CLUSTER)
    controller("ec2").delete_network_interface(NetworkInterfaceId=eni)
    assert root("ec2").describe_network_interfaces()["NetworkInterfaces"] == []


def test_allowed_the_eks_optimized_ami_parameter(controller: Callable[[str], Any]) -> None:
    name = (
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )
    assert controller("ssm").get_parameter(Name=name)["Parameter"]["Value"].startswith("ami-")
