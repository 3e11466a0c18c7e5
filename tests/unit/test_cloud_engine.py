"""The engine's remaining surface: views, keep-warm tag, cluster, node identity, wiring."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import provisioner.cloud as cloud
from provisioner.api import constants as c
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import LaunchSpec, SubnetRef
from tests.unit.test_cloud_helpers import CLUSTER, POOL, ROLE_NAME, World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_find_managed_by_cluster_pool_and_group(world: World) -> None:
    first = world.engine.acquire(world.spec(count=2))
    other = world.engine.acquire(world.spec(count=1, pool_name="other", pool_uid="uid-2"))
    world.ec2.run_instances(ImageId=world.ami_id(), MinCount=1, MaxCount=1)  # not ours

    mine = world.engine.find_managed(CLUSTER)
    assert {v.instance_id for v in mine} == {*first.instance_ids, *other.instance_ids}
    assert {v.instance_id for v in world.engine.find_managed(CLUSTER, POOL)} == set(
        first.instance_ids
    )
    assert world.engine.find_managed(CLUSTER, POOL, "gen-9") == []
    assert world.engine.find_managed("another-cluster") == []

    world.engine.release(other.instance_ids)
    assert {v.instance_id for v in world.engine.find_managed(CLUSTER)} == set(first.instance_ids)
    gone = world.engine.find_managed(CLUSTER, "other", states=("terminated",))
    assert [v.state for v in gone] == ["terminated"]


def test_describe_skips_unknown_ids_and_keeps_order(world: World) -> None:
    result = world.engine.acquire(world.spec(count=2))
    ids = [result.instance_ids[1], "i-0123456789abcdef0", result.instance_ids[0]]
    views = world.engine.describe(ids)
    assert [v.instance_id for v in views] == [result.instance_ids[1], result.instance_ids[0]]
    view = views[0]
    assert view.state in ("pending", "running") and view.instance_type == "p4d.24xlarge"
    assert view.private_dns_name and view.launch_time is not None
    assert view.network_interfaces and view.network_interfaces[0].attachment is not None
    assert view.network_interfaces[0].attachment.is_primary


def test_keep_warm_tag_is_set_and_cleared(world: World) -> None:
    result = world.engine.acquire(world.spec(count=2))
    until = datetime(2030, 1, 1, 12, 30, tzinfo=UTC)

    world.engine.set_keep_warm_tag(result.instance_ids, until)
    views = world.engine.describe(result.instance_ids)
    assert {v.tags[c.TAG_KEEP_WARM_UNTIL] for v in views} == {"2030-01-01T12:30:00Z"}
    assert {v.managed.keep_warm_until for v in views} == {until}

    world.engine.set_keep_warm_tag(result.instance_ids, None)
    assert {v.managed.keep_warm_until for v in world.engine.describe(result.instance_ids)} == {None}


def test_keep_warm_tag_on_unknown_instance_is_reported(world: World) -> None:
    assert world.clients.ec2_once is not None
    with Stubber(world.clients.ec2_once) as stub:
        stub.add_client_error("create_tags", "InvalidInstanceID.NotFound", "no such instance")
        with pytest.raises(CloudError) as caught:
            world.engine.set_keep_warm_tag(["i-0123456789abcdef0"], None)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert "no such instance" in caught.value.message


def test_a_throttled_keep_warm_tag_is_tried_once_and_said_throttled(world: World) -> None:
    """The mirror tag is sent once: a throttle comes back at once for the pool's backoff,
    and the retrying client (whose SDK would sleep in the pool worker) is never used."""
    assert world.clients.ec2_once is not None
    with Stubber(world.clients.ec2_once) as once, Stubber(world.clients.ec2) as retrying:
        once.add_client_error("create_tags", "RequestLimitExceeded", "Request limit exceeded.")
        with pytest.raises(CloudError) as caught:
            world.engine.set_keep_warm_tag(["i-0123456789abcdef0"], None)
        once.assert_no_pending_responses()
        retrying.assert_no_pending_responses()
    assert caught.value.throttled


def test_cluster_info_from_describe_cluster(world: World) -> None:
    info = world.cluster
    assert info.name == CLUSTER and info.status == "ACTIVE" and info.version == "1.33"
    assert info.endpoint.startswith("https://") and info.certificate_authority
    assert info.service_cidr == "172.20.0.0/16"
    assert set(info.subnet_ids) == set(world.subnets.values())
    assert info.security_group_ids
    with pytest.raises(CloudError) as caught:
        world.engine.cluster("missing")
    assert caught.value.kind is ErrorKind.CONFIG and caught.value.reason == "ClusterNotFound"


def test_node_identity_is_verified(world: World) -> None:
    eks = world.clients.eks
    with pytest.raises(CloudError) as caught:
        world.engine.verify_node_identity(cluster=CLUSTER, role_arn=world.role_arn)
    assert caught.value.reason == "AccessEntryMissing"

    eks.create_access_entry(  # type: ignore[attr-defined]
        clusterName=CLUSTER, principalArn=world.role_arn, type="EC2_LINUX"
    )
    profile = world.engine.verify_node_identity(cluster=CLUSTER, role_arn=world.role_arn)
    assert profile == world.profile


def test_wrong_access_entry_type_and_wrong_role_are_refused(world: World) -> None:
    world.clients.eks.create_access_entry(  # type: ignore[attr-defined]
        clusterName=CLUSTER, principalArn=world.role_arn, type="STANDARD"
    )
    with pytest.raises(CloudError) as caught:
        world.engine.verify_node_identity(cluster=CLUSTER, role_arn=world.role_arn)
    assert caught.value.reason == "AccessEntryWrongType"

    other = world.role_arn.replace(ROLE_NAME, "someone-else")
    with pytest.raises(CloudError) as caught:
        world.engine.verify_node_identity(cluster=CLUSTER, role_arn=other)
    assert caught.value.kind is ErrorKind.CONFIG
    assert caught.value.reason == "InstanceProfileNotFound"


def test_build_clients_points_every_service_at_the_endpoint() -> None:
    session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b")
    clients = build_clients(session, "us-west-2", "http://127.0.0.1:5999", max_attempts=3)
    every: tuple[Any, ...] = (clients.ec2, clients.ssm, clients.eks, clients.iam)
    for client in every:
        meta = client.meta
        assert meta.endpoint_url == "http://127.0.0.1:5999"
        assert meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert clients.ec2.meta.region_name == "us-west-2"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"count": 0}, "count must be >= 1"),
        ({"mode": "spot"}, "mode must be one of"),
        ({"subnets": ()}, "at least one subnet"),
        ({"pool_uid": ""}, "pool's UID"),
        ({"acquire_generation": -1}, "generation"),
    ],
)
def test_launch_spec_refuses_nonsense(overrides: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "pool_name": "p",
        "pool_uid": "u",
        "acquire_generation": 0,
        "cluster_name": "c",
        "count": 1,
        "instance_type": "m5.large",
        "mode": "runinstances",
        "subnets": (SubnetRef("subnet-1", "us-east-1a"),),
    }
    fields.update(overrides)
    with pytest.raises(ValueError, match=message):
        LaunchSpec(**fields)


def test_public_surface() -> None:
    assert sorted(cloud.__all__) == cloud.__all__
    for name in cloud.__all__:
        assert hasattr(cloud, name), name
