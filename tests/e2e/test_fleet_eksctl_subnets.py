"""With the real Kueue manager: fleet mode on a cluster laid out as eksctl makes it.

eksctl registers a public and a private subnet in every zone with the cluster. EC2 refuses
a CreateFleet whose overrides name one instance type in one zone twice (InvalidFleetConfig,
"duplicate instance pools"), so the fleet must send one subnet per zone, chosen by the
rule ``provisioner/cloud/subnets.py`` states (room for the gang, private first, most free
addresses). Two gangs run on such a cluster:
- one over every zone: its Workload is admitted with N Ready nodes, launched by one
  CreateFleet that EC2 accepted, with one override per zone, each the zone's private
  subnet;
- one pinned to a zone with room for fewer than N: no instance is ever live for it, the
  pool reports the shortfall, and once the zone has room the gang is Ready (N-or-0);
- one on an On-Demand Capacity Reservation: its fleet names the reservation as reserved
  capacity, and all N run inside it, on the reservation zone's private subnet.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import boto3
from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.e2e.conftest import check_state, conditions, eventually, pool, submit, workload_of
from tests.support.ec2_listing import described_instances

N = 2
TYPE = "m5.large"
SHORT_ZONE = "us-east-1c"
ODCR_ZONE = "us-east-1b"


def add_private_subnets(endpoint_url: str) -> dict[str, str]:
    """A private subnet beside the default (public) one in every zone, as eksctl does."""
    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    public = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    private: dict[str, str] = {}
    for n, subnet in enumerate(sorted(public["Subnets"], key=lambda s: s["AvailabilityZone"])):
        assert subnet["MapPublicIpOnLaunch"], "default subnets are the public ones"
        made = ec2.create_subnet(
            VpcId=subnet["VpcId"],
            CidrBlock=f"172.31.{128 + 16 * n}.0/20",
            AvailabilityZone=subnet["AvailabilityZone"],
        )["Subnet"]
        private[subnet["AvailabilityZone"]] = made["SubnetId"]
    return private


def live(ec2: Any, pool_name: str) -> list[dict[str, Any]]:
    return described_instances(
        ec2,
        [
            {"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
    )


def ready_nodes(env: Any, pool_name: str) -> int:
    core = k8s.CoreV1Api(env.control_plane.api_client())
    nodes = core.list_node(label_selector=f"{c.POOL_LABEL}={pool_name}").items
    return sum(
        any(x.type == "Ready" and x.status == "True" for x in n.status.conditions or ())
        for n in nodes
    )


def subnets_of(request: dict[str, Any]) -> list[str]:
    configs = request["params"]["LaunchTemplateConfigs"]
    return [o["SubnetId"] for cfg in configs for o in cfg["Overrides"]]


def fleets_of(emu: Any, pool_name: str) -> list[dict[str, Any]]:
    return [
        r
        for r in emu.launch_requests("CreateFleet")
        if {"Key": c.TAG_POOL, "Value": pool_name}
        in next(
            t["Tags"] for t in r["params"]["TagSpecifications"] if t["ResourceType"] == "instance"
        )
    ]


def admitted(env: Any, namespace: str, job: str) -> bool:
    wl = workload_of(env, namespace, job)
    return check_state(wl) == c.CheckState.READY and conditions(wl).get("Admitted") == "True"


def test_fleet_mode_on_public_and_private_subnets_in_every_zone_is_ready_and_n_or_0(
    gang_local: Any, emulator: Any, namespace: str
) -> None:
    private = add_private_subnets(emulator.endpoint_url)
    env = gang_local(join_delay=0.5, job_run_seconds=30.0)
    emu, ec2 = env.emulator_client, env.ec2_client()
    # The cluster was registered with every subnet: both of every zone.
    assert len(ec2.describe_subnets()["Subnets"]) == 2 * len(private)
    emu.set_capacity(SHORT_ZONE, TYPE, N - 1)
    rid = emu.add_capacity_reservation(
        TYPE, ODCR_ZONE, N + 1, tags={c.TAG_CLUSTER: env.cluster_name}
    )
    tag = uuid.uuid4().hex[:5]
    wide, short = (f"wide-{tag}", f"fw-{tag}"), (f"short-{tag}", f"fs-{tag}")
    odcr = (f"odcr-{tag}", f"fo-{tag}")
    submit(
        env,
        namespace,
        odcr[0],
        odcr[1],
        count=str(N),
        **{c.ANN_MODE: "fleet", c.ANN_CAPACITY_RESERVATION_ID: rid},
    )
    submit(env, namespace, wide[0], wide[1], count=str(N), **{c.ANN_MODE: "fleet"})
    submit(
        env,
        namespace,
        short[0],
        short[1],
        count=str(N),
        **{c.ANN_MODE: "fleet", c.ANN_AVAILABILITY_ZONES: SHORT_ZONE},
    )

    # The wide gang is admitted on N Ready nodes; the short one never has an instance.
    deadline = time.monotonic() + 150
    while not admitted(env, namespace, wide[0]):
        assert time.monotonic() < deadline, (pool(env, wide[1]) or {}).get("status")
        assert live(ec2, short[1]) == [], "a partial gang in the short zone"
        time.sleep(0.5)
    assert ready_nodes(env, wide[1]) == N and len(live(ec2, wide[1])) == N

    fleets = [r for r in emu.launch_requests("CreateFleet") if r["instance_ids"]]
    running = {i["InstanceId"] for i in live(ec2, wide[1])}
    (accepted,) = [r for r in fleets if set(r["instance_ids"]) == running]
    (config,) = accepted["params"]["LaunchTemplateConfigs"]
    overrides = config["Overrides"]
    assert sorted(o["SubnetId"] for o in overrides) == sorted(private.values())
    refused = [r for r in emu.launch_requests("CreateFleet") if r["error"]]
    assert refused == [], [r["error"] for r in refused]

    # The reservation's gang runs inside it, launched as reserved capacity.
    eventually(lambda: admitted(env, namespace, odcr[0]), 150, "the ODCR gang admitted")
    inside = live(ec2, odcr[1])
    assert len(inside) == N and ready_nodes(env, odcr[1]) == N
    assert {i.get("CapacityReservationId") for i in inside} == {rid}
    assert {i["SubnetId"] for i in inside} == {private[ODCR_ZONE]}
    (reserved,) = [r for r in fleets_of(emu, odcr[1]) if r["instance_ids"]]
    target = reserved["params"]["TargetCapacitySpecification"]
    assert target["DefaultTargetCapacityType"] == "reserved-capacity"
    assert "OnDemandOptions" not in reserved["params"]

    eventually(
        lambda: ((pool(env, short[1]) or {}).get("status") or {}).get("lastError"),
        60,
        "the short pool reported its shortfall",
    )
    status = (pool(env, short[1]) or {}).get("status") or {}
    assert status["lastError"]["reason"] == "InsufficientCapacity", status
    assert check_state(workload_of(env, namespace, short[0])) != c.CheckState.READY
    short_fleets = [
        r for r in emu.launch_requests("CreateFleet") if subnets_of(r) == [private[SHORT_ZONE]]
    ]
    assert short_fleets and all(r["instance_ids"] == [] for r in short_fleets)
    assert live(ec2, short[1]) == []

    # Room for N in the zone: the same gang is Ready, whole.
    emu.set_capacity(SHORT_ZONE, TYPE, 10)
    deadline = time.monotonic() + 150
    while not admitted(env, namespace, short[0]):
        assert time.monotonic() < deadline, (pool(env, short[1]) or {}).get("status")
        assert len(live(ec2, short[1])) in (0, N)
        time.sleep(0.5)
    assert ready_nodes(env, short[1]) == N
    assert {i["SubnetId"] for i in live(ec2, short[1])} == {private[SHORT_ZONE]}
