"""With the real Kueue manager: GPU gangs on reserved capacity, end to end (issue 12).

One environment runs three gangs at once (the scenarios are independent; sharing the
control plane, controller and their start-up keeps the test short):
- a 2 x p5.48xlarge gang on an active Capacity Block, in fleet mode;
- a 4 x p4d.24xlarge gang on an ODCR, in runinstances mode;
- a 2 x p5.48xlarge gang on a Capacity Block that starts a few seconds into the test.
Each asks for EFA and a cluster placement group. What is checked comes from the emulator
(DescribeInstances, DescribeCapacityReservations, DescribePlacementGroups and the log of
launch requests as EC2 received them) and from Kueue's Workloads: admitted with N instances
all inside the reservation, one EFA interface per network card on each, all in the pool's
placement group; at no poll is an instance outside its reservation; the late block's gang
has no instance before the block starts and is Ready after; and once the pools are
released, every reservation has all its slots free again.

The late block's start is real time: the controller's clock is real, so waiting a few
seconds is the honest way to let it start (advance_clock would move only the emulator's).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from provisioner.api import constants as c
from tests.e2e.conftest import GNP, check_state, conditions, eventually, pool, submit, workload_of
from tests.support.ec2_listing import described_instances

P5 = "p5.48xlarge"
P4D = "p4d.24xlarge"
ZONE = "us-east-1b"
# The pool's stack (Pulumi) takes 10-25 s before the first launch attempt on a loaded
# machine; the block must still be scheduled then, or the hold is never exercised.
LATE_START_SECONDS = 35.0
TWO_HOURS = 2 * 3600.0


@dataclass
class Gang:
    job: str
    pool: str
    instance_type: str
    count: int
    mode: str
    reservation: str
    slots: int
    cards: int
    starts_at: float | None = None
    seen_outside: list[str] = field(default_factory=list)
    held_seen: bool = False
    ready_at: float | None = None
    timeline: dict[str, float] = field(default_factory=dict)

    def annotations(self) -> dict[str, str]:
        return {
            "count": str(self.count),
            c.ANN_INSTANCE_TYPE: self.instance_type,
            c.ANN_MODE: self.mode,
            c.ANN_CAPACITY_RESERVATION_ID: self.reservation,
            c.ANN_EFA: "true",
            c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER,
        }


def live(ec2: Any, pool_name: str) -> list[dict[str, Any]]:
    return described_instances(
        ec2,
        [
            {"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
    )


def available(ec2: Any, rid: str) -> int:
    (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
        "CapacityReservations"
    ]
    return int(found["AvailableInstanceCount"])


def admitted(env: Any, namespace: str, gang: Gang) -> bool:
    wl = workload_of(env, namespace, gang.job)
    return check_state(wl) == c.CheckState.READY and conditions(wl).get(c.WL_ADMITTED) == "True"


def test_gpu_gangs_on_capacity_blocks_and_an_odcr_with_efa_in_a_placement_group(
    gang_local: Any, namespace: str
) -> None:
    started = time.monotonic()
    env = gang_local(join_delay=0.5, job_run_seconds=1.0)
    emu = env.emulator_client
    ec2 = env.ec2_client()
    now = emu.now()
    tag = uuid.uuid4().hex[:5]
    # The controller may launch only into reservations tagged for its cluster.
    ours = {c.TAG_CLUSTER: env.cluster_name}
    block = Gang(f"p5-block-{tag}", f"p5b-{tag}", P5, 2, "fleet", "", 3, 32)
    # Each reservation is given to the cluster by its tag: the webhook refuses any other.
    ours = {c.TAG_CLUSTER: env.cluster_name}
    block.reservation = emu.add_capacity_reservation(
        P5, ZONE, block.slots, "capacity-block", start=now - 60, end=now + TWO_HOURS, tags=ours
    )
    odcr = Gang(f"p4d-odcr-{tag}", f"p4d-{tag}", P4D, 4, "runinstances", "", 5, 4)
    odcr.reservation = emu.add_capacity_reservation(P4D, ZONE, odcr.slots, tags=ours)
    late = Gang(f"p5-late-{tag}", f"p5l-{tag}", P5, 2, "fleet", "", 2, 32)
    late.starts_at = now + LATE_START_SECONDS
    late.reservation = emu.add_capacity_reservation(
        P5, ZONE, late.slots, "capacity-block", start=late.starts_at, end=now + TWO_HOURS, tags=ours
    )
    gangs = (block, odcr, late)
    assert {r["State"] for r in emu.capacity_reservations()} == {"active", "scheduled"}
    for gang in gangs:
        assert available(ec2, gang.reservation) == gang.slots
        submit(env, namespace, gang.job, gang.pool, **gang.annotations())

    # Acquisition, polled: never an instance outside its reservation; the late block's gang
    # has none before its start and is held (the pool says why) meanwhile.
    deadline = time.monotonic() + 120
    while not all(g.ready_at for g in gangs):
        assert time.monotonic() < deadline, [(g.job, g.ready_at, g.held_seen) for g in gangs]
        for gang in gangs:
            instances = live(ec2, gang.pool)
            gang.seen_outside += [
                i["InstanceId"]
                for i in instances
                if i.get("CapacityReservationId") != gang.reservation
            ]
            if gang.starts_at is not None and not gang.held_seen:
                assert emu.now() < gang.starts_at, (
                    f"the block started before the pool tried to launch: {gang.timeline}; "
                    "raise LATE_START_SECONDS"
                )
            if gang.starts_at is not None and emu.now() < gang.starts_at - 0.5:
                assert instances == [], "launched before the Capacity Block started"
                error = ((pool(env, gang.pool) or {}).get("status") or {}).get("lastError") or {}
                if error.get("reason") == "ReservationNotActive":
                    gang.held_seen = True
                    starts = datetime.fromtimestamp(gang.starts_at, UTC)
                    assert f"{starts:%Y-%m-%dT%H:%M:%SZ}" in error["message"], error
            if gang.ready_at is None and admitted(env, namespace, gang):
                gang.ready_at = emu.now()
            status = (pool(env, gang.pool) or {}).get("status") or {}
            mark = f"{status.get('phase')}/{(status.get('lastError') or {}).get('reason')}"
            gang.timeline.setdefault(mark, round(emu.now() - now, 1))
            if instances:
                gang.timeline.setdefault("instances", round(emu.now() - now, 1))
        time.sleep(0.5)
    acquired = time.monotonic()
    for gang in gangs:
        print(gang.job, gang.timeline)

    for gang in gangs:
        assert gang.seen_outside == [], f"{gang.job}: instances outside {gang.reservation}"
        instances = live(ec2, gang.pool)
        assert len(instances) == gang.count
        assert {i["CapacityReservationId"] for i in instances} == {gang.reservation}
        assert {i["Placement"]["AvailabilityZone"] for i in instances} == {ZONE}
        for instance in instances:
            # p5 and p4d cards take efa-only: an ENA primary, one EFA-only interface per card.
            # (The CNI's own ENI joins card 0 as a plain interface.)
            kinds = {
                (n["Attachment"]["NetworkCardIndex"], n["Attachment"]["DeviceIndex"]): n.get(
                    "InterfaceType"
                )
                for n in instance["NetworkInterfaces"]
            }
            efa = list(kinds.values()).count("efa-only")
            assert efa == gang.cards, f"{instance['InstanceId']}: {efa} EFA-only interfaces"
            assert kinds[(0, 0)] == "interface" and "efa" not in kinds.values()
        (group_name,) = {i["Placement"].get("GroupName") for i in instances}
        assert group_name, "instances outside any placement group"
        (group,) = ec2.describe_placement_groups(GroupNames=[group_name])["PlacementGroups"]
        assert group["Strategy"] == "cluster"
        assert {"Key": c.TAG_POOL, "Value": gang.pool} in group["Tags"]
        assert available(ec2, gang.reservation) == gang.slots - gang.count
    for gang in (block, late):
        assert {i["InstanceLifecycle"] for i in live(ec2, gang.pool)} == {"capacity-block"}

    # The requests as EC2 received them.
    requests = emu.launch_requests()
    ours = [r for r in requests if r["error"] is None and r["instance_ids"]]
    by_reservation: dict[str, list[dict[str, Any]]] = {}
    for request in ours:
        params = request["params"]
        if request["action"] == "RunInstances":
            rid = params["CapacityReservationSpecification"]["CapacityReservationTarget"][
                "CapacityReservationId"
            ]
            assert "InstanceMarketOptions" not in params  # an ODCR is not a block
        else:
            assert params["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == (
                "capacity-block"
            )
            # A fleet reads the target and the block's market type from the pool's template.
            (config,) = params["LaunchTemplateConfigs"]
            spec = config["LaunchTemplateSpecification"]
            (version,) = ec2.describe_launch_template_versions(
                LaunchTemplateId=spec["LaunchTemplateId"], Versions=[str(spec["Version"])]
            )["LaunchTemplateVersions"]
            data = version["LaunchTemplateData"]
            assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
            rid = data["CapacityReservationSpecification"]["CapacityReservationTarget"][
                "CapacityReservationId"
            ]
        by_reservation.setdefault(rid, []).append(request)
    assert {r["action"] for r in by_reservation[block.reservation]} == {"CreateFleet"}
    assert {r["action"] for r in by_reservation[odcr.reservation]} == {"RunInstances"}
    assert {r["action"] for r in by_reservation[late.reservation]} == {"CreateFleet"}
    # Nothing for the late block reached EC2 before its start.
    assert late.starts_at is not None
    assert all(r["at"] >= late.starts_at for r in by_reservation[late.reservation])
    assert late.held_seen, "the late block's pool never reported ReservationNotActive"
    assert late.timeline["Acquiring/ReservationNotActive"] < LATE_START_SECONDS
    assert late.ready_at is not None and late.ready_at >= late.starts_at
    core = k8s.CoreV1Api(env.control_plane.api_client())
    nodes = core.list_node(label_selector=f"{c.POOL_LABEL}={late.pool}").items
    assert len(nodes) == late.count
    assert all(
        any(x.type == "Ready" and x.status == "True" for x in n.status.conditions) for n in nodes
    )

    # Release: every slot comes back.
    for gang in gangs:
        eventually(
            lambda g=gang: conditions(workload_of(env, namespace, g.job)).get("Finished") == "True",
            60,
            f"{gang.job} finished",
        )
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    for gang in gangs:
        custom.delete_cluster_custom_object(*GNP, gang.pool)
    for gang in gangs:
        eventually(lambda g=gang: pool(env, g.pool) is None, 90, f"pool {gang.pool} released")
        assert live(ec2, gang.pool) == []
        assert available(ec2, gang.reservation) == gang.slots
    print(
        f"\ngpu reservations e2e: acquired in {acquired - started:.1f}s, "
        f"whole test {time.monotonic() - started:.1f}s "
        f"(late block start at +{LATE_START_SECONDS:.0f}s, ready at "
        f"{datetime.fromtimestamp(late.ready_at, UTC):%H:%M:%S})"
    )
