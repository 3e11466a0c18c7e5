"""Every resource a launch touches, authorized as AWS does, against the controller's policy.

The controller's credentials (a role holding `controller_policy(cluster_name="demo")`,
assumed through STS) launch on the emulator, which authorizes RunInstances and CreateFleet
per resource with the keys the Service Authorization Reference lists
(`devenv.emulator.launch_contexts`), and `iam:PassRole` of the instance profile's role. Each
refusal is one promise of the policy (images of the allowed owners, this cluster's
templates, reservations tagged for this cluster, node access entries only); each "dropped"
case removes one grant from the policy and shows the product's own launch then refused.
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
from devenv.emulator.policy_evaluation import Decision, RequestContext, evaluate
from devenv.emulator.seeding import share_public_ami
from provisioner.api import constants as c
from provisioner.cloud.iam_policy import controller_policy
from provisioner.cloud.tags import (
    FLEET_RESOURCE_TYPES,
    RUNINSTANCES_RESOURCE_TYPES,
    tag_specifications,
)
from stacks.launch_template import launch_template_request
from stacks.spec import pool_tags
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
ZONE = "us-east-1a"
ACCOUNT = "123456789012"
CLUSTER = "demo"
NO_RETRIES = Config(retries={"total_max_attempts": 1})
ROOT = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
Clients = Callable[[str], Any]


def _client(service: str, keys: dict[str, str]) -> Any:
    return boto3.client(service, region_name=REGION, config=NO_RETRIES, **keys)


def root(service: str) -> Any:
    return _client(service, ROOT)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch) as state:
        yield state


@pytest.fixture
def node_profile(emulator: EmulatorState) -> str:
    """The node role's instance profile, as the operator makes it; its ARN."""
    iam = root("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    iam.create_role(RoleName="nodes", AssumeRolePolicyDocument=json.dumps(trust))
    made = iam.create_instance_profile(InstanceProfileName="nodes")
    iam.add_role_to_instance_profile(InstanceProfileName="nodes", RoleName="nodes")
    return str(made["InstanceProfile"]["Arn"])


def the_policy(**kwargs: Any) -> dict[str, Any]:
    return controller_policy(
        account_id=ACCOUNT,
        region=REGION,
        node_role_arns=[f"arn:aws:iam::{ACCOUNT}:role/nodes"],
        cluster_name=CLUSTER,
        **kwargs,
    )


def as_controller(document: dict[str, Any]) -> Clients:
    """Clients signing as a role that holds exactly `document`."""
    iam = root("iam")
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
    name = f"controller-{len(iam.list_roles()['Roles'])}"
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    iam.put_role_policy(RoleName=name, PolicyName="controller", PolicyDocument=json.dumps(document))
    creds = root("sts").assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName=name)[
        "Credentials"
    ]
    keys = {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }
    return lambda service: _client(service, keys)


def without(document: dict[str, Any], sid: str, kind: str | None = None) -> dict[str, Any]:
    """`document` with statement `sid` dropped, or only its `kind` resources when given."""
    statements = []
    for st in document["Statement"]:
        if st["Sid"] == sid and kind is None:
            continue
        if st["Sid"] == sid:
            kept = [r for r in st["Resource"] if f":{kind}/" not in r]
            assert kept != st["Resource"], f"{sid} has no {kind} resource"
            st = {**st, "Resource": kept}
        statements.append(st)
    assert statements != document["Statement"], f"no statement {sid}"
    return {**document, "Statement": statements}


def _ami() -> str:
    return str(root("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def _subnet() -> str:
    found = root("ec2").describe_subnets(Filters=[{"Name": "availability-zone", "Values": [ZONE]}])
    return str(found["Subnets"][0]["SubnetId"])


def _security_group() -> str:
    return str(root("ec2").describe_security_groups()["SecurityGroups"][0]["GroupId"])


def _gang_tags(cluster: str = CLUSTER) -> dict[str, str]:
    return {**pool_tags(cluster, "train", timedelta(hours=4)), c.TAG_GROUP: "g-1"}


def own_template(controller: Clients, profile: str, image: str | None = None, **props: Any) -> str:
    """A pool template as the pool's stack makes it, with the controller's credentials."""
    made = root("ec2").describe_launch_templates()["LaunchTemplates"]
    request = launch_template_request(
        {
            "name": f"agp-demo-train-{len(made)}",
            "image_id": image or _ami(),
            "instance_type": "m5.large",
            "user_data": "#!/bin/true",
            "instance_profile_arn": profile,
            "security_group_ids": [_security_group()],
            "tags": pool_tags(CLUSTER, "train", timedelta(hours=4)),
            **props,
        }
    )
    return str(
        controller("ec2").create_launch_template(**request)["LaunchTemplate"]["LaunchTemplateId"]
    )


def run(controller: Clients, template: str, **extra: Any) -> Any:
    """RunInstances as the controller sends it (`cloud.runinstances`): its template, a
    subnet, and the gang's tags."""
    return controller("ec2").run_instances(
        LaunchTemplate={"LaunchTemplateId": template},
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=_subnet(),
        TagSpecifications=tag_specifications(_gang_tags(), RUNINSTANCES_RESOURCE_TYPES),
        **extra,
    )


def fleet(controller: Clients, template: str, **extra: Any) -> Any:
    """An instant fleet as the controller sends it (`cloud.fleet`)."""
    return controller("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "on-demand",
        },
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": "m5.large", "SubnetId": _subnet()}],
            }
        ],
        TagSpecifications=tag_specifications(_gang_tags(), FLEET_RESOURCE_TYPES),
        **extra,
    )


def refused(call: Callable[[], Any]) -> str:
    with pytest.raises(ClientError) as err:
        call()
    assert err.value.response["Error"]["Code"] == "UnauthorizedOperation"
    return str(err.value.response["Error"]["Message"])


def _launched() -> int:
    found = root("ec2").describe_instances()["Reservations"]
    return sum(len(r["Instances"]) for r in found)


# --- the policy's promises -------------------------------------------------------------------
def test_the_product_launch_passes_every_resource_check(node_profile: str) -> None:
    controller = as_controller(the_policy())
    template = own_template(controller, node_profile)
    run(controller, template)
    fleet(controller, template)
    assert _launched() == 2


def test_refused_an_image_of_another_owner_from_the_template_or_the_request(
    emulator: EmulatorState, node_profile: str
) -> None:
    controller = as_controller(the_policy())
    stranger = share_public_ami(ACCOUNT, REGION, "444455556666", "community-image")
    theirs = own_template(controller, node_profile, image=stranger)
    message = refused(lambda: run(controller, theirs))
    assert f"on resource: arn:aws:ec2:{REGION}::image/{stranger}" in message
    refused(lambda: fleet(controller, theirs))
    mine = own_template(controller, node_profile)
    refused(lambda: run(controller, mine, ImageId=stranger))
    assert _launched() == 0


def test_refused_a_launch_without_this_clusters_launch_template(node_profile: str) -> None:
    controller = as_controller(the_policy())
    message = refused(
        lambda: controller("ec2").run_instances(
            ImageId=_ami(),
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=_subnet(),
            TagSpecifications=tag_specifications(_gang_tags(), RUNINSTANCES_RESOURCE_TYPES),
        )
    )
    assert f"ec2:RunInstances on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*" in message
    assert _launched() == 0


def _reservation(emulator: EmulatorState, tags: dict[str, str]) -> str:
    return emulator.add_capacity_reservation("m5.large", ZONE, 2, tags=tags)


def test_refused_a_reservation_not_tagged_for_this_cluster(
    emulator: EmulatorState, node_profile: str
) -> None:
    controller = as_controller(the_policy())
    template = own_template(controller, node_profile)
    for tags in ({c.TAG_CLUSTER: "other-cluster"}, {}):
        theirs = _reservation(emulator, tags)
        target = {"CapacityReservationTarget": {"CapacityReservationId": theirs}}
        message = refused(
            lambda target=target: run(controller, template, CapacityReservationSpecification=target)  # type: ignore[misc]
        )
        assert f"capacity-reservation/{theirs}" in message
        refused(
            lambda theirs=theirs: controller("ec2").create_fleet(  # type: ignore[misc]
                Type="instant",
                TargetCapacitySpecification={
                    "TotalTargetCapacity": 1,
                    "DefaultTargetCapacityType": "reserved-capacity",
                },
                ReservedCapacityOptions={
                    "ReservationTypes": ["on-demand-capacity-reservation"],
                    "CapacityReservationTarget": {"CapacityReservationIds": [theirs]},
                },
                LaunchTemplateConfigs=[
                    {
                        "LaunchTemplateSpecification": {"LaunchTemplateId": template},
                        "Overrides": [{"InstanceType": "m5.large", "SubnetId": _subnet()}],
                    }
                ],
                TagSpecifications=tag_specifications(_gang_tags(), FLEET_RESOURCE_TYPES),
            )
        )
    assert _launched() == 0
    ours = _reservation(emulator, {c.TAG_CLUSTER: CLUSTER})
    target = {"CapacityReservationTarget": {"CapacityReservationId": ours}}
    run(controller, template, CapacityReservationSpecification=target)
    assert _launched() == 1


def test_refused_a_launch_with_a_key_pair_the_templates_never_name(node_profile: str) -> None:
    root("ec2").create_key_pair(KeyName="someones-key")
    controller = as_controller(the_policy())
    template = own_template(controller, node_profile)
    message = refused(lambda: run(controller, template, KeyName="someones-key"))
    assert ":key-pair/someones-key" in message


# --- one grant dropped: the product's launch is refused ---------------------------------------
def test_dropping_pass_role_refuses_the_launch(node_profile: str) -> None:
    controller = as_controller(without(the_policy(), "PassNodeRoleToEC2Only"))
    template = own_template(controller, node_profile)
    message = refused(lambda: run(controller, template))
    assert f"iam:PassRole on resource: arn:aws:iam::{ACCOUNT}:role/nodes" in message
    refused(lambda: fleet(controller, template))
    assert _launched() == 0


def test_pass_role_must_be_towards_ec2(node_profile: str) -> None:
    document = the_policy()
    for st in document["Statement"]:
        if st["Sid"] == "PassNodeRoleToEC2Only":
            st["Condition"] = {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}}
    controller = as_controller(document)
    refused(lambda: run(controller, own_template(controller, node_profile)))


def test_dropping_the_security_group_resource_refuses_the_launch(node_profile: str) -> None:
    controller = as_controller(
        without(the_policy(), "LaunchIntoTheClustersNetwork", "security-group")
    )
    template = own_template(controller, node_profile)
    message = refused(lambda: run(controller, template))
    assert f"on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/{_security_group()}" in (
        message
    )
    # An instant fleet's launches are RunInstances on the caller's permissions.
    refused(lambda: fleet(controller, template))
    assert _launched() == 0


def test_dropping_the_subnet_resource_refuses_the_launch(node_profile: str) -> None:
    controller = as_controller(without(the_policy(), "LaunchIntoTheClustersNetwork", "subnet"))
    template = own_template(controller, node_profile)
    assert f":subnet/{_subnet()}" in refused(lambda: run(controller, template))


# --- the node access entry ---------------------------------------------------------------------
def test_only_the_node_roles_ec2_linux_access_entry_is_allowed() -> None:
    document = the_policy(manage_access_entry=True)
    cluster = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"
    node_role = f"arn:aws:iam::{ACCOUNT}:role/nodes"

    def entry(principal: str, kind: str) -> Decision:
        keys = {"eks:principalArn": principal, "eks:accessEntryType": kind}
        return evaluate([document], RequestContext("eks:CreateAccessEntry", cluster, keys))

    assert entry(node_role, "EC2_LINUX") is Decision.ALLOW
    # A STANDARD entry could map the principal into cluster-admins.
    assert entry(node_role, "STANDARD") is Decision.IMPLICIT_DENY
    assert entry(f"arn:aws:iam::{ACCOUNT}:role/someone", "EC2_LINUX") is Decision.IMPLICIT_DENY
    assert entry(f"arn:aws:iam::{ACCOUNT}:user/admin", "STANDARD") is Decision.IMPLICIT_DENY


def test_the_emulator_refuses_a_standard_access_entry_to_the_controller(
    emulator: EmulatorState, node_profile: str
) -> None:
    eks = root("eks")
    eks.create_cluster(
        name=CLUSTER,
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
        resourcesVpcConfig={"subnetIds": [_subnet()]},
    )
    controller = as_controller(the_policy(manage_access_entry=True))
    admin = f"arn:aws:iam::{ACCOUNT}:role/nodes"
    with pytest.raises(ClientError) as err:
        controller("eks").create_access_entry(
            clusterName=CLUSTER,
            principalArn=admin,
            type="STANDARD",
            kubernetesGroups=["cluster-admins"],
        )
    assert err.value.response["Error"]["Code"] == "AccessDeniedException"
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == []
    controller("eks").create_access_entry(clusterName=CLUSTER, principalArn=admin, type="EC2_LINUX")
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == [admin]
