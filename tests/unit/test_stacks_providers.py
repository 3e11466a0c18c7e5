"""The instance set, instance profile, access entry and placement group providers:
check/diff pure, create/read/delete against moto in-process with the emulator patches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from moto import mock_aws

from devenv.emulator import ClusterSpec, install
from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from stacks import access_entry, instance_profile, instance_set
from stacks.access_entry import AccessEntryProvider
from stacks.failures import PoolResourceError
from stacks.instance_profile import InstanceProfileProvider
from stacks.instance_set import InstanceSetProvider
from stacks.placement_group import PlacementGroupProvider, placement_group_request

pytestmark = pytest.mark.unit

CONN = {"region": "us-east-1", "endpoint": ""}
IDS = ["i-0000000000000000b", "i-0000000000000000a"]


def set_props(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        **CONN,
        "cluster": "demo",
        "pool": "p1",
        "group": "gen-0",
        "instance_ids": sorted(IDS),
        "release_wait_seconds": 10.0,
        "poll_seconds": 0.05,
    }
    base.update(overrides)
    return base


# --- pure ---------------------------------------------------------------------------------
def test_instance_set_check_sorts_ids_and_refuses_bad_ones() -> None:
    provider = InstanceSetProvider()
    ok = provider.check({}, set_props(instance_ids=IDS))
    assert ok.failures == [] and ok.inputs["instance_ids"] == sorted(IDS)

    for bad in ([], ["i-1"], [IDS[0], IDS[0]]):
        result = provider.check({}, set_props(instance_ids=bad))
        assert [f.property for f in result.failures] == ["instance_ids"]
    assert [f.property for f in provider.check({}, set_props(group="")).failures] == ["group"]


@pytest.mark.parametrize(
    ("change", "replaces"),
    [
        ({}, []),
        ({"instance_ids": ["i-0000000000000000c"]}, ["instance_ids"]),
        ({"group": "gen-1"}, ["group"]),
        ({"pool": "p2"}, ["pool"]),
        ({"poll_seconds": 1.0}, []),
    ],
)
def test_instance_set_diff_replaces_a_different_gang(
    change: dict[str, Any], replaces: list[str]
) -> None:
    result = InstanceSetProvider().diff("p1/gen-0", set_props(), set_props(**change))
    assert result.replaces == replaces
    assert result.changes is bool(change)
    # The old gang is released before a new one is recorded (N-or-0).
    assert result.delete_before_replace is True


@pytest.mark.parametrize(
    ("provider", "olds", "change", "replaces"),
    [
        (
            InstanceProfileProvider(),
            {"name": "ip", "role_arn": "r", "manage": False},
            {"manage": True},
            ["manage"],
        ),
        (
            InstanceProfileProvider(),
            {"name": "ip", "role_arn": "r", "manage": False},
            {"role_arn": "s"},
            ["role_arn"],
        ),
        (
            AccessEntryProvider(),
            {"cluster": "c", "role_arn": "r", "manage": False},
            {"cluster": "d"},
            ["cluster"],
        ),
        (
            PlacementGroupProvider(),
            {"name": "pg", "strategy": "cluster"},
            {"strategy": "spread"},
            ["strategy"],
        ),
        (PlacementGroupProvider(), {"name": "pg", "strategy": "cluster"}, {"endpoint": "x"}, []),
    ],
)
def test_identity_resources_replace_on_what_they_verify(
    provider: Any, olds: dict[str, Any], change: dict[str, Any], replaces: list[str]
) -> None:
    old = {**CONN, **olds}
    result = provider.diff("id", old, {**old, **change})
    assert result.changes is True and result.replaces == replaces


def test_placement_group_request_is_a_tagged_cluster_group() -> None:
    request = placement_group_request({"name": "atomic-gang-demo-p1", "tags": {"k": "v"}})
    assert request == {
        "GroupName": "atomic-gang-demo-p1",
        "Strategy": "cluster",
        "TagSpecifications": [
            {"ResourceType": "placement-group", "Tags": [{"Key": "k", "Value": "v"}]}
        ],
    }
    failures = (
        PlacementGroupProvider().check({}, {"name": "", "region": "r", "strategy": "x"}).failures
    )
    assert {f.property for f in failures} == {"name", "strategy"}


def test_identity_checks_refuse_a_role_that_is_not_an_arn() -> None:
    failures = (
        InstanceProfileProvider()
        .check({}, {**CONN, "name": "ip", "role_arn": "not-an-arn", "cluster": "c"})
        .failures
    )
    assert [f.property for f in failures] == ["role_arn"]


def test_every_resource_type_can_be_found_after_a_crash() -> None:
    from stacks.access_entry import AccessEntry
    from stacks.adoption import ADOPTERS
    from stacks.instance_profile import InstanceProfile
    from stacks.instance_set import InstanceSet
    from stacks.launch_template import LaunchTemplate
    from stacks.outputs import _INSTANCE_SET_TYPE
    from stacks.placement_group import PlacementGroup

    classes = (AccessEntry, InstanceProfile, InstanceSet, LaunchTemplate, PlacementGroup)
    tokens = {f"pulumi-python:{cls._resource_type_name}" for cls in classes}
    assert tokens == set(ADOPTERS)
    assert f"pulumi-python:{InstanceSet._resource_type_name}" == _INSTANCE_SET_TYPE


# --- against moto -------------------------------------------------------------------------
@dataclass
class Aws:
    ec2: Any
    iam: Any
    eks: Any
    role_arn: str

    def gang(self, count: int = 2, group: str = "gen-0", pool: str = "p1") -> list[str]:
        tags = {
            c.TAG_MANAGED: "true",
            c.TAG_CLUSTER: "demo",
            c.TAG_POOL: pool,
            c.TAG_GROUP: group,
        }
        images = self.ec2.describe_images(Owners=["602401143452"])["Images"]
        launched = self.ec2.run_instances(
            ImageId=images[0]["ImageId"],
            InstanceType="m5.large",
            MinCount=count,
            MaxCount=count,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )
        return sorted(i["InstanceId"] for i in launched["Instances"])

    def states(self, ids: list[str]) -> set[str]:
        found = self.ec2.describe_instances(InstanceIds=ids)["Reservations"]
        return {i["State"]["Name"] for r in found for i in r["Instances"]}


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws():
        state = install()
        state.reset()
        state.register_eks_cluster(ClusterSpec(name="demo"))
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(RoleName="node", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        yield Aws(
            boto3.client("ec2", region_name="us-east-1"),
            iam,
            boto3.client("eks", region_name="us-east-1"),
            role,
        )


def test_instance_set_records_only_the_pools_live_gang(aws: Aws) -> None:
    provider = InstanceSetProvider()
    ids = aws.gang()
    created = provider.create(set_props(instance_ids=ids))
    assert created.id == "p1/gen-0" and created.outs is not None
    assert created.outs["instance_ids"] == ids

    others = aws.gang(pool="other")
    with pytest.raises(PoolResourceError) as foreign:
        provider.create(set_props(instance_ids=[*ids, *others]))
    assert foreign.value.reason == "InstanceNotInPool"

    aws.ec2.terminate_instances(InstanceIds=ids[:1])
    with pytest.raises(PoolResourceError) as gone:
        provider.create(set_props(instance_ids=ids))
    assert gone.value.reason == "InstanceSetNotLive"


def test_an_instance_ec2_does_not_list_yet_is_not_recorded_as_gone(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Eventual consistency in the Amazon EC2 API": a just-launched id missing from a
    listing is not gone. Recording it as gone would have the pool release a whole gang."""
    monkeypatch.setattr(instance_set, "VISIBLE_WAIT_SECONDS", 0.0)
    ids = aws.gang()
    unlisted = "i-0123456789abcdef0"  # as EC2 answers for an id it does not list yet
    with pytest.raises(PoolResourceError) as unseen:
        InstanceSetProvider().create(set_props(instance_ids=[*ids, unlisted]))
    assert unseen.value.reason == "InstanceSetNotVisible"
    assert unseen.value.kind is FailureKind.RETRYABLE
    assert unlisted in unseen.value.message


def test_instance_set_read_reports_the_live_part_and_adopt_finds_it(aws: Aws) -> None:
    provider = InstanceSetProvider()
    ids = aws.gang(3)
    props = set_props(instance_ids=ids)
    assert provider.read("p1/gen-0", props).outs == props

    aws.ec2.terminate_instances(InstanceIds=ids[:1])
    read = provider.read("p1/gen-0", props)
    assert read.id == "p1/gen-0" and read.outs is not None
    assert read.outs["instance_ids"] == ids[1:]
    adopted = instance_set.adopt(props)
    assert adopted is not None and adopted[1]["instance_ids"] == ids[1:]

    aws.ec2.terminate_instances(InstanceIds=ids[1:])
    assert provider.read("p1/gen-0", props).id == ""
    assert instance_set.adopt(props) is None


def test_a_set_whose_release_died_after_terminating_stays_until_its_enis_are_deleted(
    aws: Aws,
) -> None:
    # The chaos suite's leak: a release killed after its terminate, then a recovery refresh.
    provider = InstanceSetProvider()
    ids = aws.gang(2)
    props = set_props(instance_ids=ids)
    subnet = aws.ec2.describe_instances(InstanceIds=ids[:1])["Reservations"][0]["Instances"][0][
        "SubnetId"
    ]
    cni = aws.ec2.create_network_interface(SubnetId=subnet, Description=f"aws-K8S-{ids[0]}")
    cni_id = cni["NetworkInterface"]["NetworkInterfaceId"]
    aws.ec2.attach_network_interface(NetworkInterfaceId=cni_id, InstanceId=ids[0], DeviceIndex=1)
    aws.ec2.terminate_instances(InstanceIds=ids)  # the release's first half; then it died

    read = provider.read("p1/gen-0", props)

    assert read.id == "p1/gen-0" and read.outs is not None
    assert read.outs["instance_ids"] == ids
    provider.delete("p1/gen-0", read.outs)  # the release, repeated by the next update
    left = aws.ec2.describe_network_interfaces(
        Filters=[{"Name": "network-interface-id", "Values": [cni_id]}]
    )["NetworkInterfaces"]
    assert left == []
    assert provider.read("p1/gen-0", props).id == ""  # nothing left: now it is gone


def test_a_set_the_pool_released_first_is_described_once_by_its_delete(aws: Aws) -> None:
    """The pool's release terminates its set before the stack's destroy: the delete's one
    answer by id shows it terminated, and neither its release nor its wait asks again."""
    ids = aws.gang(2)
    aws.ec2.terminate_instances(InstanceIds=ids)
    asked: list[dict[str, Any]] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        asked.append(params)

    ec2 = instance_set.client("ec2", set_props())
    ec2.meta.events.register("provide-client-params.ec2.DescribeInstances", count)
    try:
        InstanceSetProvider().delete("p1/gen-0", set_props(instance_ids=ids))
    finally:
        ec2.meta.events.unregister("provide-client-params.ec2.DescribeInstances", count)

    assert aws.states(ids) == {"terminated"}
    assert len(asked) == 1, asked
    assert asked[0].get("InstanceIds") == sorted(ids), "not asked by id"


def test_instance_set_delete_terminates_and_cleans_enis_but_spares_strangers(aws: Aws) -> None:
    ids = aws.gang(2)
    stranger = aws.gang(1, pool="other")
    subnet = aws.ec2.describe_instances(InstanceIds=ids[:1])["Reservations"][0]["Instances"][0][
        "SubnetId"
    ]
    eni = aws.ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    aws.ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=ids[0], DeviceIndex=1)

    # A record that (wrongly) lists a stranger never terminates it.
    InstanceSetProvider().delete("p1/gen-0", set_props(instance_ids=[*ids, *stranger]))

    assert aws.states(ids) == {"terminated"}
    assert aws.states(stranger) == {"running"}
    assert (
        aws.ec2.describe_network_interfaces(
            Filters=[{"Name": "network-interface-id", "Values": [eni]}]
        )["NetworkInterfaces"]
        == []
    )


def _profile_props(aws: Aws, manage: bool) -> dict[str, Any]:
    return {
        **CONN,
        "name": "ip-demo",
        "role_arn": aws.role_arn,
        "cluster": "demo",
        "manage": manage,
    }


def test_instance_profile_verifies_or_creates(aws: Aws) -> None:
    provider = InstanceProfileProvider()
    with pytest.raises(PoolResourceError) as missing:
        provider.create(_profile_props(aws, manage=False))
    assert missing.value.reason == "InstanceProfileNotFound"
    assert instance_profile.adopt(_profile_props(aws, manage=False)) is None

    created = provider.create(_profile_props(aws, manage=True))
    assert created.id == "ip-demo" and created.outs is not None
    assert created.outs["arn"].endswith(":instance-profile/ip-demo")
    # Create again (an earlier pass got this far): adopted, not duplicated.
    assert provider.create(_profile_props(aws, manage=True)).id == "ip-demo"
    assert provider.read("ip-demo", _profile_props(aws, manage=False)).id == "ip-demo"
    provider.delete("ip-demo", _profile_props(aws, manage=True))  # shared: stays
    assert aws.iam.get_instance_profile(InstanceProfileName="ip-demo")


def test_instance_profile_with_another_role_names_the_fix(aws: Aws) -> None:
    aws.iam.create_role(RoleName="other", AssumeRolePolicyDocument="{}")
    aws.iam.create_instance_profile(InstanceProfileName="ip-demo")
    aws.iam.add_role_to_instance_profile(InstanceProfileName="ip-demo", RoleName="other")

    for manage in (False, True):
        with pytest.raises(PoolResourceError) as wrong:
            InstanceProfileProvider().create(_profile_props(aws, manage=manage))
        assert wrong.value.reason == "InstanceProfileRoleMismatch"
        assert "add the role" in wrong.value.message


def test_access_entry_verifies_or_creates(aws: Aws) -> None:
    provider = AccessEntryProvider()
    props = {**CONN, "cluster": "demo", "role_arn": aws.role_arn, "manage": False}
    with pytest.raises(PoolResourceError) as missing:
        provider.create(props)
    assert missing.value.reason == "AccessEntryMissing"
    assert provider.read("x", props).id == ""

    created = provider.create({**props, "manage": True})
    assert created.outs is not None and created.outs["type"] == "EC2_LINUX"
    assert provider.create({**props, "manage": True}).id == created.id  # in use: fine
    assert access_entry.adopt(props) is not None


def test_a_placement_group_still_in_use_is_not_deleted_and_says_why(aws: Aws) -> None:
    """EC2 refuses to delete a group that holds instances (InvalidPlacementGroup.InUse,
    which on a launch means another zone): the delete says instances still run in it, a
    wait that can end, and goes through once they have terminated."""
    provider = PlacementGroupProvider()
    props = {**CONN, "name": "atomic-gang-demo-p1", "strategy": "cluster"}
    provider.create(props)
    images = aws.ec2.describe_images(Owners=["602401143452"])["Images"]
    inside = aws.ec2.run_instances(
        ImageId=images[0]["ImageId"],
        InstanceType="p4d.24xlarge",
        MinCount=1,
        MaxCount=1,
        Placement={"GroupName": "atomic-gang-demo-p1"},
    )["Instances"][0]["InstanceId"]

    with pytest.raises(PoolResourceError) as refused:
        provider.delete("atomic-gang-demo-p1", props)
    assert refused.value.reason == "PlacementGroupInUse"
    assert refused.value.kind is FailureKind.RETRYABLE
    assert "another zone" not in refused.value.message
    assert "Values=atomic-gang-demo-p1" in refused.value.message

    aws.ec2.terminate_instances(InstanceIds=[inside])
    provider.delete("atomic-gang-demo-p1", props)
    assert not aws.ec2.describe_placement_groups()["PlacementGroups"]
