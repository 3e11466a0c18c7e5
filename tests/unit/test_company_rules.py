"""Company rules for instances (issue #32, item 5): the installer's extra tags on every
resource the controller creates, the nodes' root volume, and an account whose organization
denies launches without a `CostCenter` tag (an SCP, modelled by the emulator).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import ValidationError

from devenv.emulator.organization import require_tags_policy
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.fleet import request_params as fleet_params
from provisioner.cloud.iam_policy import controller_policy
from provisioner.cloud.images import root_device_of
from provisioner.cloud.runinstances import request_params as runinstances_params
from provisioner.cloud.tags import (
    REASON_ORGANIZATION_POLICY,
    RUNINSTANCES_RESOURCE_TYPES,
    launch_tags,
    tag_specifications,
)
from provisioner.cloud.types import LaunchTemplateRef, SubnetRef
from provisioner.controllers.pool.facts import (
    LaunchTarget,
    StackNames,
    gather_launch_facts,
    launch_spec,
)
from stacks.launch_template import launch_template_data, launch_template_request
from stacks.spec import PoolLookups, pool_spec_for, pool_tags
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_engine import FakeEngine
from tests.unit.test_cloud_helpers import World, emulated_aws

pytestmark = pytest.mark.unit

COST = {"CostCenter": "cc-4711", "team": "ml-platform"}
NODE_ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"


def settings(**instances: Any) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
            **({"instances": instances} if instances else {}),
        }
    )


def shape() -> GangShape:
    return GangShape(
        pool="pretrain",
        count=2,
        instance_type="p5.48xlarge",
        mode="runinstances",
        region="us-east-1",
        node_role_arn=NODE_ROLE,
        keep_warm_ttl="10m",
        max_lifetime="4h",
        ami_variant="nvidia",
    )


# --- settings: what the installer may write, refused at load naming the field ------------


def test_extra_tags_keep_their_spelling_through_the_charts_camel_case() -> None:
    loaded = settings(extraTags={"CostCenter": "cc-1", "cost_center": "x", "Team Name": "y"})
    assert loaded.instances.extra_tags == {
        "CostCenter": "cc-1",
        "cost_center": "x",
        "Team Name": "y",
    }


@pytest.mark.parametrize(
    ("tags", "says"),
    [
        ({"aws:createdBy": "me"}, "aws: prefix is reserved"),
        ({"AWS:x": "me"}, "aws: prefix is reserved"),
        ({"owner": "aws:me"}, "aws: prefix is reserved"),
        ({c.TAG_POOL: "other"}, "controller's own ownership and cluster tags"),
        ({f"{c.PREFIX}anything": "x"}, "controller's own ownership and cluster tags"),
        ({"kubernetes.io/cluster/other": "owned"}, "controller's own ownership and cluster tags"),
        ({"k" * 129: "v"}, "must be 1-128 characters"),
        ({"k": "v" * 257}, "EC2 allows at most 256"),
        ({f"t{i}": "v" for i in range(44)}, "at most 43 fit"),
    ],
)
def test_extra_tags_ec2_or_the_controller_would_refuse_are_refused_at_load(
    tags: dict[str, str], says: str
) -> None:
    with pytest.raises(ValidationError) as err:
        settings(extraTags=tags)
    assert says in str(err.value) and "instances.extraTags" in str(err.value)
    assert "Tag your Amazon EC2 resources" in str(err.value) or "prefix" in says or "own" in says


def test_forty_three_extra_tags_fit_beside_the_controllers_seven() -> None:
    loaded = settings(extraTags={f"t{i}": "v" for i in range(43)})
    assert len(launch_tags(_spec(loaded))) == 50


@pytest.mark.parametrize(
    ("volume", "says"),
    [
        ({"volumeSize": "2Ti"}, 'not a size in GiB such as "200Gi"'),
        ({"volumeSize": "200Gi", "volumeType": "st1"}, "Input should be 'gp3', 'gp2', 'io1'"),
        ({"volumeSize": "200Gi", "volumeType": "io2"}, "iops is required for volumeType io2"),
        ({"volumeSize": "200Gi", "volumeType": "gp2", "iops": 3000}, "cannot be set for gp2"),
        ({"volumeSize": "200Gi", "volumeType": "io1", "iops": 3000, "throughput": 500}, "gp3"),
        ({"volumeSize": 0}, "greater than or equal to 1"),
    ],
)
def test_root_volume_settings_are_checked_at_load(volume: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as err:
        settings(rootVolume=volume)
    assert says in str(err.value)
    assert err.value.errors()[0]["loc"][:2] == ("instances", "root_volume")


def test_root_volume_is_unset_by_default_and_reads_karpenter_spelling() -> None:
    assert settings().instances.root_volume is None
    volume = settings(rootVolume={"volumeSize": "200Gi"}).instances.root_volume
    assert volume is not None and (volume.volume_size, volume.volume_type) == (200, "gp3")


# --- the tags on what the stack creates and on every launch --------------------------------


def _spec(loaded: Settings, **facts: Any) -> Any:
    engine = FakeEngine()
    gathered = gather_launch_facts(engine, loaded, shape())
    return launch_spec(
        loaded,
        target=LaunchTarget(pool_name="pretrain", pool_uid="uid-1", generation=1, group="gen-1"),
        shape=shape(),
        facts=gathered,
        subnets=(SubnetRef("subnet-1", "us-east-1a"),),
        stack=StackNames(template_id="lt-0123456789abcdef0"),
        **facts,
    )


def _tags_by_type(specs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {s["ResourceType"]: {t["Key"]: t["Value"] for t in s["Tags"]} for s in specs}


def test_every_launch_carries_the_installers_tags_beside_the_controllers() -> None:
    spec = _spec(settings(extraTags=COST))
    subnet = spec.subnets[0]
    run = _tags_by_type(runinstances_params(spec, subnet, "t", None)["TagSpecifications"])
    assert set(run) == {"instance", "volume", "network-interface"}
    fleet = _tags_by_type(fleet_params(spec, "t")["TagSpecifications"])
    assert set(fleet) == {"instance", "fleet"}
    for tags in (*run.values(), *fleet.values()):
        assert tags["CostCenter"] == "cc-4711" and tags["team"] == "ml-platform"
        assert tags[c.TAG_MANAGED] == "true" and tags[c.TAG_CLUSTER] == "demo"


def test_the_stacks_resources_carry_the_installers_tags() -> None:
    spec = pool_spec_for(
        settings(extraTags=COST), shape(), PoolLookups(image_id="ami-1", user_data="x")
    )
    assert spec.tags == {**COST, **pool_tags("demo", "pretrain", timedelta(hours=4))}
    assert spec.extra_tags == COST
    props = {**spec.launch_template_props("arn:aws:iam::1:instance-profile/p"), "region": "r"}
    request = launch_template_request(props)
    template_tags = _tags_by_type(request["TagSpecifications"])["launch-template"]
    launched = _tags_by_type(request["LaunchTemplateData"]["TagSpecifications"])
    for tags in (template_tags, *launched.values()):
        assert tags["CostCenter"] == "cc-4711"
    assert set(launched) == {"instance", "volume", "network-interface"}


# --- the root volume ------------------------------------------------------------------------


def test_unset_root_volume_leaves_the_amis_mapping_and_the_template_inputs_alone() -> None:
    engine = FakeEngine()
    facts = gather_launch_facts(engine, settings(), shape())
    assert facts.root_device is None  # not even asked
    spec = pool_spec_for(settings(), shape(), PoolLookups(image_id="ami-1", user_data="x"))
    props = spec.launch_template_props("arn")
    # A pool prepared before this setting existed diffs as unchanged.
    assert "root_volume" not in props
    assert "BlockDeviceMappings" not in launch_template_data({**props, "region": "r"})


def test_root_volume_goes_on_the_amis_root_device_and_dies_with_the_instance() -> None:
    loaded = settings(rootVolume={"volumeSize": "500Gi", "volumeType": "gp3", "iops": 6000})
    engine = FakeEngine()
    facts = gather_launch_facts(engine, loaded, shape())
    assert facts.root_device is not None and facts.root_device.device_name == "/dev/xvda"
    spec = pool_spec_for(
        loaded,
        shape(),
        PoolLookups(
            image_id="ami-1", user_data="x", root_device_name=facts.root_device.device_name
        ),
    )
    data = launch_template_data({**spec.launch_template_props("arn"), "region": "r"})
    assert data["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {
                "VolumeSize": 500,
                "VolumeType": "gp3",
                "DeleteOnTermination": True,
                "Iops": 6000,
            },
        }
    ]


def test_a_root_volume_smaller_than_the_amis_snapshot_is_refused_before_any_launch() -> None:
    engine = FakeEngine()  # its AMI's root snapshot is 20 GiB
    with pytest.raises(CloudError) as err:
        gather_launch_facts(engine, settings(rootVolume={"volumeSize": "8Gi"}), shape())
    assert err.value.kind is ErrorKind.CONFIG and err.value.reason == "RootVolumeTooSmall"
    assert "instances.rootVolume.volumeSize" in str(err.value) and "20Gi" in str(err.value)
    assert engine.launched == []


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_the_root_device_is_read_from_describe_images(world: World) -> None:
    root = root_device_of(world.ec2, world.ami_id())
    assert root.device_name == "/dev/xvda"


def test_a_launch_from_a_template_with_a_root_volume_gets_that_volume(world: World) -> None:
    ami = world.ami_id()
    root = root_device_of(world.ec2, ami)
    data = launch_template_data(
        {
            "image_id": ami,
            "instance_type": "p5.48xlarge",
            "user_data": "x",
            "root_volume": {"device_name": root.device_name, "size": 300, "type": "gp3"},
        }
    )
    made = world.ec2.create_launch_template(LaunchTemplateName="lt-root", LaunchTemplateData=data)
    template = LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"], "$Latest")
    result = world.engine.acquire(world.spec(count=1, launch_template=template))
    described = world.ec2.describe_instances(InstanceIds=list(result.instance_ids))
    instance = described["Reservations"][0]["Instances"][0]
    (mapped,) = instance["BlockDeviceMappings"]  # the root replaced, no second disk
    assert mapped["DeviceName"] == root.device_name == instance["RootDeviceName"]
    volume = world.ec2.describe_volumes(VolumeIds=[mapped["Ebs"]["VolumeId"]])["Volumes"][0]
    assert (volume["Size"], volume["VolumeType"]) == (300, "gp3")


# --- an account whose organization requires CostCenter on every instance ------------------


def _denied(call: Any) -> str:
    with pytest.raises(ClientError) as err:
        call()
    assert err.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return str(err.value.response["Error"]["Message"])


def test_the_example_scp_is_the_organizations_user_guide_one() -> None:
    policy = require_tags_policy(["CostCenter"])
    (statement,) = policy["Statement"]
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Null": {"aws:RequestTag/CostCenter": "true"}}
    assert "arn:aws:ec2:*:*:instance/*" in statement["Resource"]


def test_the_organization_denies_an_untagged_launch_to_everyone_and_allows_a_tagged_one(
    world: World,
) -> None:
    world.emu.require_launch_tags(["CostCenter"])
    ec2 = world.ec2  # the account's root user: SCPs bind it too
    before = len(world.live_instances())
    untagged = dict(ImageId=world.ami_id(), InstanceType="m5.large", MinCount=1, MaxCount=1)
    said = _denied(lambda: ec2.run_instances(**untagged))
    assert "with an explicit deny in a service control policy" in said
    assert "Encoded authorization failure message" in said
    assert len(world.live_instances()) == before  # nothing was made
    tagged = tag_specifications({"CostCenter": "cc-1"}, RUNINSTANCES_RESOURCE_TYPES)
    ec2.run_instances(**untagged, TagSpecifications=tagged)
    assert len(world.live_instances()) == before + 1
    world.emu.require_launch_tags([])
    ec2.run_instances(**untagged)  # lifted


def test_the_product_says_the_organization_refused_and_names_the_setting(world: World) -> None:
    world.emu.require_launch_tags(["CostCenter"])
    with pytest.raises(CloudError) as err:
        world.engine.acquire(world.spec())
    assert err.value.kind is ErrorKind.CONFIG
    assert err.value.reason == REASON_ORGANIZATION_POLICY
    message = str(err.value)
    assert "service control policy" in message and "instances.extraTags" in message
    assert "nothing was launched" in message
    assert world.live_instances() == []
    # The same launch with the installer's tags goes through.
    result = world.engine.acquire(world.spec(extra_tags={"CostCenter": "cc-1"}))
    assert len(result.instance_ids) == 4


def test_a_fleet_needs_the_tags_on_its_template_too_as_the_pools_stack_makes_it(
    world: World,
) -> None:
    """An instant fleet's volumes take their tags from the launch template only, and the
    SCP requires the tag on volumes too: the pool's template must carry the extra tags."""
    world.emu.require_launch_tags(["CostCenter"])
    bare = world.launch_template()
    untagged = world.spec(mode="fleet", launch_template=bare)
    with pytest.raises(CloudError) as err:
        world.engine.acquire(untagged)
    assert err.value.reason == REASON_ORGANIZATION_POLICY
    assert world.live_instances() == []
    request_only = world.spec(mode="fleet", launch_template=bare, extra_tags={"CostCenter": "x"})
    with pytest.raises(CloudError) as err:
        world.engine.acquire(request_only)
    assert "volume/*" in str(err.value)
    spec = pool_spec_for(
        settings(extraTags={"CostCenter": "x"}),
        shape(),
        PoolLookups(image_id=world.ami_id(), user_data="x"),
    )
    props = {**spec.launch_template_props(world.profile.arn), "name": "lt-stack", "region": "r"}
    made = world.ec2.create_launch_template(**launch_template_request(props))
    ours = LaunchTemplateRef(made["LaunchTemplate"]["LaunchTemplateId"], "$Latest")
    tagged = world.spec(
        mode="fleet", acquire_generation=2, launch_template=ours, extra_tags={"CostCenter": "x"}
    )
    assert len(world.engine.acquire(tagged).instance_ids) == 4


# --- the controller's own policy with extra tags ------------------------------------------


def test_the_controllers_policy_allows_its_launches_and_stack_creates_with_extra_tags(
    world: World,
) -> None:
    account = "123456789012"
    root = boto3.client("iam", region_name="us-east-1")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    role = root.create_role(RoleName="controller", AssumeRolePolicyDocument=json.dumps(trust))
    policy = controller_policy(
        account_id=account, region="us-east-1", node_role_arns=[NODE_ROLE], cluster_name="demo"
    )
    root.put_role_policy(RoleName="controller", PolicyName="p", PolicyDocument=json.dumps(policy))
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=role["Role"]["Arn"], RoleSessionName="controller"
    )["Credentials"]
    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        config=Config(retries={"total_max_attempts": 1}),
    )
    world.emu.require_launch_tags(["CostCenter"])
    spec = pool_spec_for(
        settings(extraTags=COST), shape(), PoolLookups(image_id=world.ami_id(), user_data="x")
    )
    made = ec2.create_launch_template(
        **launch_template_request({**spec.launch_template_props(""), "region": "us-east-1"})
    )
    tags = {**launch_tags(world.spec(cluster_name="demo", extra_tags=COST))}
    ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": made["LaunchTemplate"]["LaunchTemplateId"]},
        ImageId=world.ami_id(),
        InstanceType="m5.large",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=tag_specifications(tags, RUNINSTANCES_RESOURCE_TYPES),
    )
    # Without the organization's tag the same credentials are refused by the SCP, not IAM.
    without = {k: v for k, v in tags.items() if k != "CostCenter"}
    said = _denied(
        lambda: ec2.run_instances(
            ImageId=world.ami_id(),
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=tag_specifications(without, RUNINSTANCES_RESOURCE_TYPES),
        )
    )
    assert "service control policy" in said


def test_an_instance_boots_from_one_root_volume_on_the_amis_root_device(world: World) -> None:
    """Without a mapping of its own: the AMI's root device and size, one volume."""
    result = world.engine.acquire(world.spec(count=1))
    described = world.ec2.describe_instances(InstanceIds=list(result.instance_ids))
    instance = described["Reservations"][0]["Instances"][0]
    (root,) = instance["BlockDeviceMappings"]
    image = world.ec2.describe_images(ImageIds=[instance["ImageId"]])["Images"][0]
    assert root["DeviceName"] == instance["RootDeviceName"] == image["RootDeviceName"]
    volume = world.ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"][0]
    (mapped,) = [m for m in image["BlockDeviceMappings"] if m["DeviceName"] == root["DeviceName"]]
    assert volume["Size"] == mapped["Ebs"]["VolumeSize"]
