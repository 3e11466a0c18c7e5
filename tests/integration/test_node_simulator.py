"""The node simulator joins exactly the instances whose nodeadm user data is valid."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv import device_plugins
from devenv.device_plugins import DeviceRegistrar
from devenv.nodesim import SIMULATED_LABEL, NodeSimulator
from provisioner.api import constants as c
from provisioner.cloud.nodeadm import render_user_data
from tests.support.clocks import SecondsClock

CLUSTER = "sim-cluster"


@pytest.fixture
def ec2(emulator: Any) -> Any:
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=emulator.endpoint_url)


@pytest.fixture(params=["listing", "feed"])
def simulator(
    request: pytest.FixtureRequest, kube_api: Any, ec2: Any, emulator: Any
) -> Iterator[tuple[NodeSimulator, SecondsClock]]:
    """Every behaviour holds both ways: listing EC2 on each pass, and reading the
    emulator's instance event feed (what `devenv` runs)."""
    clock = SecondsClock()
    core = k8s.CoreV1Api(kube_api)
    events = emulator.client if request.param == "feed" else None
    sim = NodeSimulator(
        core=core, ec2=ec2, cluster_name=CLUSTER, join_delay=5.0, clock=clock, events=events
    )
    yield sim, clock
    for node in core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
        core.delete_node(node.metadata.name)


def _launch(
    ec2: Any, user_data: str, count: int = 1, instance_type: str = "m5.large", **extra: Any
) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    reservation = ec2.run_instances(
        ImageId=image,
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        UserData=user_data,
        Placement={"AvailabilityZone": "us-east-1a"},
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": c.cluster_ownership_tag(CLUSTER), "Value": "owned"},
                    {"Key": c.TAG_MANAGED, "Value": "true"},
                ],
            }
        ],
        **extra,
    )
    return [i["InstanceId"] for i in reservation["Instances"]]


def _user_data(pool: str, group: str) -> str:
    return render_user_data(
        cluster_name=CLUSTER,
        api_server_endpoint="https://127.0.0.1:6443",
        certificate_authority="Y2E=",
        service_cidr="10.96.0.0/16",
        pool=pool,
        group=group,
    )


def _past_the_join_delay(sim: NodeSimulator, clock: SecondsClock) -> None:
    """A pass that first sees the instances running, then one after the join delay."""
    sim.run_once()
    clock.now += 10
    sim.run_once()


def _cni_enis(ec2: Any, iid: str) -> list[dict[str, Any]]:
    """The ENIs the simulator, as the VPC CNI, made for this instance (by their name)."""
    filters = [{"Name": "description", "Values": [f"aws-K8S-{iid}"]}]
    return list(ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"])


def _nodes(kube_api: Any) -> dict[str, Any]:
    items = k8s.CoreV1Api(kube_api).list_node(label_selector=f"{SIMULATED_LABEL}=true").items
    return {n.spec.provider_id.rsplit("/", 1)[-1]: n for n in items}


def test_valid_user_data_joins_as_a_ready_node_after_the_join_delay(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    (iid,) = _launch(ec2, _user_data("pool-a", "g3"))
    sim.run_once()
    assert iid not in _nodes(kube_api), "joined before the join delay"
    seen_at = clock.now
    clock.now += 5.1
    sim.run_once()
    node = _nodes(kube_api)[iid]
    # What the admission benchmark subtracts: the boot the simulator made this node wait.
    assert sim.joins()[iid].first_running == seen_at
    assert sim.joins()[iid].ready - seen_at == pytest.approx(5.1)
    assert node.spec.provider_id == f"aws:///us-east-1a/{iid}"
    assert node.metadata.labels[c.POOL_LABEL] == "pool-a"
    assert node.metadata.labels[c.GROUP_LABEL] == "g3"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        (c.GANG_TAINT_KEY, "pool-a", "NoSchedule")
    ]
    ready = {cond.type: cond.status for cond in node.status.conditions}
    assert ready["Ready"] == "True"


def test_a_joined_node_carries_a_cni_eni_that_outlives_its_instance(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    (iid,) = _launch(ec2, _user_data("pool-a", "g4"))
    sim.run_once()
    clock.now += 5.1
    sim.run_once()
    sim.run_once()  # a second pass attaches no second ENI
    assert iid in _nodes(kube_api)

    (eni,) = _cni_enis(ec2, iid)
    assert eni["Attachment"]["DeleteOnTermination"] is False
    ec2.terminate_instances(InstanceIds=[iid])
    assert [e["NetworkInterfaceId"] for e in _cni_enis(ec2, iid)] == [eni["NetworkInterfaceId"]]


class _TerminatedBeforeTheAttach:
    """EC2 where the instance is terminated after the CNI made its ENI, before it attaches."""

    def __init__(self, ec2: Any, instance_id: str) -> None:
        self._ec2 = ec2
        self._instance_id = instance_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)

    def create_network_interface(self, **kwargs: Any) -> Any:
        made = self._ec2.create_network_interface(**kwargs)
        self._ec2.terminate_instances(InstanceIds=[self._instance_id])
        return made


def test_a_cni_eni_whose_attach_ec2_refuses_is_deleted_not_left_behind(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    (iid,) = _launch(ec2, _user_data("pool-a", "g5"))
    sim.ec2 = _TerminatedBeforeTheAttach(ec2, iid)

    with pytest.raises(ClientError, match="IncorrectInstanceState"):
        _past_the_join_delay(sim, clock)

    assert _cni_enis(ec2, iid) == []
    assert iid not in _nodes(kube_api)


def test_broken_user_data_never_joins_and_says_why(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    (broken,) = _launch(ec2, "#!/bin/bash\necho this is not a NodeConfig\n")
    sim.run_once()
    clock.now += 60
    sim.run_once()
    sim.run_once()
    assert broken not in _nodes(kube_api)
    assert "NodeConfig" in sim.refused()[broken]


def test_an_instance_told_never_to_join_stays_out(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    first, second = _launch(ec2, _user_data("pool-b", "g1"), count=2)
    sim.refuse_join(second)
    _past_the_join_delay(sim, clock)
    nodes = _nodes(kube_api)
    assert first in nodes and second not in nodes


def test_termination_removes_the_node(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    (iid,) = _launch(ec2, _user_data("pool-c", "g1"))
    _past_the_join_delay(sim, clock)
    assert iid in _nodes(kube_api)
    ec2.terminate_instances(InstanceIds=[iid])
    sim.run_once()
    assert iid not in _nodes(kube_api)


def test_a_restarted_simulator_removes_the_node_of_an_instance_gone_meanwhile(
    kube_api: Any, ec2: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    """Gone Nodes are deleted by the name their instance registered under, and a new
    simulator, which registered nothing, finds the ones before it by listing every Node."""
    sim, clock = simulator
    (iid,) = _launch(ec2, _user_data("pool-r", "g1"))
    _past_the_join_delay(sim, clock)
    assert iid in _nodes(kube_api)
    ec2.terminate_instances(InstanceIds=[iid])
    restarted = NodeSimulator(
        core=sim.core,
        ec2=ec2,
        cluster_name=CLUSTER,
        join_delay=5.0,
        clock=clock,
        sweep_every=3,
        events=sim.events,
    )
    restarted.run_once()
    assert iid not in _nodes(kube_api)


def _launch_p5_on_a_block(ec2: Any, emulator: Any) -> tuple[str, str]:
    """A p5.48xlarge with 32 EFA interfaces on a Capacity Block: (instance, block)."""
    block = emulator.client.add_capacity_reservation(
        "p5.48xlarge", "us-east-1a", 1, reservation_type="capacity-block"
    )
    subnet = ec2.describe_subnets(
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1a"]}]
    )["Subnets"][0]["SubnetId"]
    efa = [
        {"DeviceIndex": 0 if n == 0 else 1, "NetworkCardIndex": n, "InterfaceType": "efa"}
        | {"SubnetId": subnet}
        for n in range(32)
    ]
    (iid,) = _launch(
        ec2,
        _user_data("pool-gpu", "g1"),
        instance_type="p5.48xlarge",
        NetworkInterfaces=efa,
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={
            "CapacityReservationTarget": {"CapacityReservationId": block}
        },
    )
    return iid, block


def _with_device_plugins(
    kube_api: Any, sim: NodeSimulator, clock: SecondsClock, *without_gang_toleration: str
) -> None:
    """The modelled device-plugin DaemonSets in the apiserver, registering 5 s after Ready."""
    apps = k8s.AppsV1Api(kube_api)
    device_plugins.install(apps, without_gang_toleration=without_gang_toleration)
    sim.devices = DeviceRegistrar(k8s.CoreV1Api(kube_api), apps, delay=5.0, clock=clock)


def test_a_gpu_instance_on_a_block_gets_its_gpus_and_efa_the_plugin_delay_after_ready(
    kube_api: Any, ec2: Any, emulator: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    _with_device_plugins(kube_api, sim, clock)
    iid, block = _launch_p5_on_a_block(ec2, emulator)
    _past_the_join_delay(sim, clock)
    node = _nodes(kube_api)[iid]
    assert {cond.type: cond.status for cond in node.status.conditions}["Ready"] == "True"
    # Ready, and not yet usable: the device plugins have not registered anything.
    assert "nvidia.com/gpu" not in node.status.allocatable
    assert "vpc.amazonaws.com/efa" not in node.status.allocatable
    clock.now += 4.9
    sim.run_once()
    assert "nvidia.com/gpu" not in _nodes(kube_api)[iid].status.allocatable
    clock.now += 0.2
    sim.run_once()
    node = _nodes(kube_api)[iid]
    allocatable, capacity = node.status.allocatable, node.status.capacity
    assert (allocatable["nvidia.com/gpu"], allocatable["vpc.amazonaws.com/efa"]) == ("8", "32")
    assert (capacity["nvidia.com/gpu"], capacity["vpc.amazonaws.com/efa"]) == ("8", "32")
    labels = node.metadata.labels
    assert labels["eks.amazonaws.com/capacityType"] == "CAPACITY_BLOCK"
    assert labels["karpenter.k8s.aws/capacity-reservation-id"] == block


def test_the_nvidia_plugin_without_the_gang_toleration_leaves_the_gpus_absent(
    kube_api: Any, ec2: Any, emulator: Any, simulator: tuple[NodeSimulator, SecondsClock]
) -> None:
    sim, clock = simulator
    _with_device_plugins(kube_api, sim, clock, device_plugins.NVIDIA_PLUGIN.name)
    iid, _ = _launch_p5_on_a_block(ec2, emulator)
    _past_the_join_delay(sim, clock)
    for _ in range(5):
        clock.now += 10
        sim.run_once()
    allocatable = _nodes(kube_api)[iid].status.allocatable
    assert "nvidia.com/gpu" not in allocatable
    assert allocatable["vpc.amazonaws.com/efa"] == "32", "the EFA plugin tolerates it"


# --- with the feed, EC2 is asked only about what is booting ------------------------------
class CountingEc2:
    """The EC2 client, counting DescribeInstances calls by kind."""

    def __init__(self, ec2: Any) -> None:
        self._ec2 = ec2
        self.listings = 0
        self.by_id = 0

    def describe_instances(self, **kwargs: Any) -> Any:
        if "InstanceIds" in kwargs:
            self.by_id += 1
        else:
            self.listings += 1
        return self._ec2.describe_instances(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)


class DroppingFeed:
    """The emulator's feed, made to lose what happens while `dropping` is set (as a reset
    of the emulator, or a reader too far behind, would)."""

    def __init__(self, feed: Any) -> None:
        self._feed = feed
        self.dropping = False

    def instance_events(self, after: int, wait: float = 0.0) -> dict[str, Any]:
        page = dict(self._feed.instance_events(after, wait))
        if self.dropping:
            page["events"], page["first"] = [], int(page["last"]) + 1
        return page


@pytest.fixture
def fed(
    kube_api: Any, ec2: Any, emulator: Any
) -> Iterator[tuple[NodeSimulator, SecondsClock, CountingEc2]]:
    clock, counting = SecondsClock(), CountingEc2(ec2)
    core = k8s.CoreV1Api(kube_api)
    sim = NodeSimulator(
        core=core,
        ec2=counting,
        cluster_name=CLUSTER,
        join_delay=5.0,
        clock=clock,
        events=DroppingFeed(emulator.client),
    )
    yield sim, clock, counting
    for node in core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
        core.delete_node(node.metadata.name)


def test_with_the_feed_a_settled_fleet_costs_ec2_nothing(
    kube_api: Any, ec2: Any, fed: tuple[NodeSimulator, SecondsClock, CountingEc2]
) -> None:
    sim, clock, counting = fed
    sim.run_once()  # the first pass lists, to learn what was there before it
    assert counting.listings == 1
    (iid,) = _launch(ec2, _user_data("pool-f", "g1"))
    _past_the_join_delay(sim, clock)
    assert iid in _nodes(kube_api)
    asked = (counting.listings, counting.by_id)
    sim.run_once()
    sim.run_once()
    assert (counting.listings, counting.by_id) == asked, "a settled fleet was asked about"
    assert counting.listings == 1, "the feed's passes listed EC2"
    ec2.terminate_instances(InstanceIds=[iid])
    sim.run_once()
    assert iid not in _nodes(kube_api)
    assert counting.listings == 1, "a termination was learnt by listing, not from the feed"


def test_with_the_feed_a_booting_instance_is_asked_about_until_seen_running(
    kube_api: Any, ec2: Any, fed: tuple[NodeSimulator, SecondsClock, CountingEc2]
) -> None:
    sim, clock, counting = fed
    sim.run_once()
    (iid,) = _launch(ec2, _user_data("pool-h", "g1"))
    sim.run_once()  # learns the launch from the feed and sees it running
    assert counting.by_id == 1
    for _ in range(3):  # inside the join delay: nothing new to ask EC2
        clock.now += 1
        sim.run_once()
    assert counting.by_id == 1, "an instance already seen running was described again"
    assert iid not in _nodes(kube_api)
    clock.now += 5
    sim.run_once()
    assert iid in _nodes(kube_api), "joined from what EC2 said when it was first running"
    assert counting.by_id == 1


def test_with_the_feed_missed_events_make_the_next_pass_list_ec2(
    kube_api: Any, ec2: Any, fed: tuple[NodeSimulator, SecondsClock, CountingEc2]
) -> None:
    sim, clock, counting = fed
    sim.run_once()
    feed = sim.events
    assert isinstance(feed, DroppingFeed)
    feed.dropping = True
    (iid,) = _launch(ec2, _user_data("pool-g", "g1"))
    sim.run_once()  # sees the gap, not the launch
    feed.dropping = False
    _past_the_join_delay(sim, clock)
    assert iid in _nodes(kube_api), "the launch lost with the dropped events never joined"
    assert counting.listings == 2


def test_with_the_feed_a_node_whose_delete_failed_is_deleted_on_the_next_pass(
    kube_api: Any,
    ec2: Any,
    fed: tuple[NodeSimulator, SecondsClock, CountingEc2],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A termination is read from the feed once; a failed Node delete must not lose it."""
    sim, clock, _ = fed
    sim.run_once()
    (iid,) = _launch(ec2, _user_data("pool-h", "g1"))
    _past_the_join_delay(sim, clock)
    assert iid in _nodes(kube_api)
    ec2.terminate_instances(InstanceIds=[iid])
    delete_node = sim.core.delete_node

    def unavailable(name: str) -> Any:
        raise ApiException(status=503, reason="the apiserver is busy")

    monkeypatch.setattr(sim.core, "delete_node", unavailable)
    with pytest.raises(ApiException):
        sim.run_once()
    monkeypatch.setattr(sim.core, "delete_node", delete_node)
    sim.run_once()
    assert iid not in _nodes(kube_api)
