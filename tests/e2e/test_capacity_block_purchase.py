"""With the real Kueue manager: gangs that ask for time, and the Capacity Blocks the
controller buys for them (issue 44). One environment, buying enabled with a cap of 800 USD
a gang and the latest start an hour after the claim:

- 2 x p5.48xlarge for 24 h, offered at +40 s (900 USD, over the cap), +5 min (700 USD) and
  +10 min (500 USD, cheaper): the +5 min block is bought, once, tagged for the cluster,
  pool, namespace and Workload; the gang is held at $0 (no instance) until the block starts,
  runs on it, and is released before the block's end.
- A second gang whose purchase answer is lost after it took effect, while EC2's reservation
  listing lags behind the purchase (the tagged look finds nothing at first): the pool keeps
  looking instead of buying again, exactly one block is bought for it (EC2's record), found
  by its intent's tag once listed, and the gang runs on it.
- A gang whose Workload is deleted after its block was bought: the block stays with the
  pool (an Event says so) and the next gang of that shape runs on it, nothing more bought.
- A 2 x p4d.24xlarge gang whose only offering costs more than the cap: Rejected naming that
  offering and its fee; nothing is bought.

And with buying off (the default), the same ask is held at $0 as a capacity shortfall and
nothing is bought. And on a queue whose GangClass enables buying (its own cap, a 24h
default duration) where the installation's cap is too low for any offering, a Job that
carries only the queue label gets its block bought under the class's cap and runs on it.

The controller's clock moves with the emulator's (`LocalEnvironment.advance_clock`), so a
block's start and its day pass without being waited for.
"""

from __future__ import annotations

import re
import time
import uuid
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from tests.e2e.conftest import (
    GNP,
    KUEUE,
    check_state,
    conditions,
    eventually,
    pool,
    submit,
    workload_of,
)
from tests.support.ec2_listing import described_instances
from tests.support.kueue_status import ADMISSION_CHECKS, wait_until_active

P5, P4D = "p5.48xlarge", "p4d.24xlarge"
ZONE = "us-east-1b"
MINUTE = 60.0
RELEASE_MARGIN = 2100.0  # capacityBlockReleaseSeconds: the product's default
# Under blockPurchase.purchaseSettle (5m by default): the pool waits it out, buying nothing.
LISTING_LAG = 45.0
GANG_CLASSES = (c.GROUP, c.VERSION, c.GANG_CLASS_PLURAL)


def live(ec2: Any, pool_name: str) -> list[dict[str, Any]]:
    return described_instances(
        ec2,
        [
            {"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
    )


def _tags(reservation: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in reservation.get("Tags") or []}


def bought(env: Any, pool_name: str) -> list[dict[str, Any]]:
    """The reservations EC2 records for the pool (the blocks bought for it)."""
    return [
        r
        for r in env.emulator_client.capacity_reservations()
        if _tags(r).get(c.TAG_POOL) == pool_name
    ]


def purchase(env: Any, pool_name: str) -> dict[str, Any]:
    return dict(((pool(env, pool_name) or {}).get("status") or {}).get("blockPurchase") or {})


def admitted(env: Any, namespace: str, job: str) -> bool:
    wl = workload_of(env, namespace, job)
    return check_state(wl) == c.CheckState.READY and conditions(wl).get(c.WL_ADMITTED) == "True"


def rejected_with(env: Any, namespace: str, job: str, reason: str) -> str | None:
    """Our check's Rejected message, or the Warning Event written with it (Kueue resets a
    deactivated Workload's check to Pending, which a poll can miss)."""
    wl = workload_of(env, namespace, job)
    if not wl:
        return None
    for entry in (wl.get("status") or {}).get("admissionChecks", []):
        if entry["state"] == c.CheckState.REJECTED:
            return str(entry["message"])
    core = k8s.CoreV1Api(env.control_plane.api_client())
    events = core.list_namespaced_event(
        namespace,
        field_selector=f"involvedObject.name={wl['metadata']['name']},reason={reason}",
    ).items
    return str(events[-1].message) if events else None


def pool_event(env: Any, pool_name: str, reason: str) -> str:
    """Every message of the pool's Events with `reason`, one a line."""
    core = k8s.CoreV1Api(env.control_plane.api_client())
    selector = f"involvedObject.name={pool_name},reason={reason}"
    events = core.list_event_for_all_namespaces(field_selector=selector).items
    return "\n".join(str(e.message) for e in events)


def held_event(env: Any, pool_name: str) -> str:
    return pool_event(env, pool_name, c.EventReason.CAPACITY_BLOCK_HELD)


def test_gangs_that_ask_for_time_get_the_earliest_block_under_the_cap_bought_once(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local(
        join_delay=0.5,
        job_run_seconds=7200.0,  # the gangs run until their block's planned release
        block_purchase={"enabled": True, "maxUpfrontFeePerGang": "800", "latestStart": "1h"},
    )
    emu, ec2 = env.emulator_client, env.ec2_client()
    # The shared emulator's clock may run ahead of real time (earlier tests move it).
    env.clock.offset = emu.now() - time.time()
    tag = uuid.uuid4().hex[:5]
    now = emu.now()
    # Fees are per instance for the whole block: 2 x 450 = 900, 2 x 350 = 700, 2 x 250 = 500.
    for start, fee in ((40.0, 450), (5 * MINUTE, 350), (10 * MINUTE, 250)):
        emu.add_capacity_block_offering(P5, ZONE, 2, now + start, 24, fee)
    first, first_pool = f"buy-{tag}", f"p5-buy-{tag}"
    asks = {"count": "2", c.ANN_INSTANCE_TYPE: P5, c.ANN_MODE: "fleet", c.ANN_MAX_LIFETIME: "48h"}
    submit(env, namespace, first, first_pool, **asks, **{c.ANN_CAPACITY_BLOCK_DURATION: "24h"})

    intent = eventually(
        lambda: purchase(env, first_pool).get("reservationId") and purchase(env, first_pool),
        120,
        lambda: f"a block bought for {first_pool}: {pool(env, first_pool)}",
    )
    assert Decimal(intent["upfrontFee"]) == 700 and intent["calls"] == 1
    [block] = bought(env, first_pool)
    assert block["CapacityReservationId"] == intent["reservationId"]
    assert block["State"] == "scheduled" and block["TotalInstanceCount"] == 2
    tags = _tags(block)
    assert tags[c.TAG_CLUSTER] == env.cluster_name and tags[c.TAG_NAMESPACE] == namespace
    assert tags[c.TAG_WORKLOAD] == workload_of(env, namespace, first)["metadata"]["name"]
    # Held at $0 until the start, said in the check's message.
    starts = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(now + 5 * MINUTE))
    eventually(
        lambda: starts in str(workload_of(env, namespace, first)),
        60,
        "the check names the block's start",
    )
    assert live(ec2, first_pool) == [] and not admitted(env, namespace, first)

    # The second gang's purchase takes effect, and its answer is lost; and EC2's listing of
    # reservations lags behind it for the controller: its tagged look finds nothing at first.
    emu.add_capacity_block_offering(P5, ZONE, 2, now + 6 * MINUTE, 24, 300)
    emu.inject_fault("PurchaseCapacityBlock", "InternalError", after=True)
    emu.set_reservation_listing_lag(LISTING_LAG, client=env.controller_keys["aws_access_key_id"])
    second, second_pool = f"lost-{tag}", f"p5-lost-{tag}"
    submit(env, namespace, second, second_pool, **asks, **{c.ANN_CAPACITY_BLOCK_DURATION: "24h"})
    eventually(
        lambda: purchase(env, second_pool).get("reservationId"),
        LISTING_LAG + 180,
        lambda: f"the lost purchase found by its tag: {pool(env, second_pool)}",
    )
    emu.set_reservation_listing_lag(0)
    consumed = emu.consumed()
    assert [e.get("action") for e in consumed].count("PurchaseCapacityBlock") == 1
    assert any(e.get("kind") == "reservation-listing" for e in consumed), "the lag bit"
    assert "Confirming whether the purchase" in pool_event(
        env, second_pool, c.EventReason.CAPACITY_BLOCK_PURCHASE_UNKNOWN
    )
    assert len(bought(env, second_pool)) == 1 and len(bought(env, first_pool)) == 1
    assert purchase(env, second_pool)["calls"] == 1

    # A block bought for a Workload deleted before its start stays with the pool; the next
    # gang of that shape runs on it.
    emu.add_capacity_block_offering(P5, ZONE, 2, now + 7 * MINUTE, 24, 300)
    gone, kept, kept_pool = f"gone-{tag}", f"next-{tag}", f"p5-kept-{tag}"
    submit(env, namespace, gone, kept_pool, **asks, **{c.ANN_CAPACITY_BLOCK_DURATION: "24h"})
    kept_block = eventually(
        lambda: purchase(env, kept_pool).get("reservationId"), 120, "a block for the gone gang"
    )
    k8s.BatchV1Api(env.control_plane.api_client()).delete_namespaced_job(
        gone, namespace, propagation_policy="Foreground"
    )
    eventually(
        lambda: not ((pool(env, kept_pool) or {}).get("spec") or {}).get("claim"),
        90,
        "the deleted Workload's claim dropped",
    )
    assert purchase(env, kept_pool).get("reservationId") == kept_block
    held = eventually(lambda: held_event(env, kept_pool), 30, "the held block's Event")
    assert kept_block in held and "stays with pool" in held, held
    submit(env, namespace, kept, kept_pool, **asks, **{c.ANN_CAPACITY_BLOCK_DURATION: "24h"})

    # No offering under the cap: rejected naming the earliest and its fee; nothing bought.
    emu.add_capacity_block_offering(P4D, ZONE, 2, now + 5 * MINUTE, 24, 5000)
    dear, dear_pool = f"dear-{tag}", f"p4d-dear-{tag}"
    submit(
        env,
        namespace,
        dear,
        dear_pool,
        **{**asks, c.ANN_INSTANCE_TYPE: P4D, c.ANN_CAPACITY_BLOCK_DURATION: "24h"},
    )
    message = eventually(
        lambda: rejected_with(env, namespace, dear, c.EventReason.NO_AFFORDABLE_CAPACITY_BLOCK),
        90,
        "the dear gang rejected",
    )
    assert re.search(r"10000(\.00)? USD upfront", message) and "Nothing was bought" in message
    assert bought(env, dear_pool) == []

    # The blocks start: each gang runs on its own (the next gang on the kept one).
    env.advance_clock(7 * MINUTE + 5)
    for job, pool_name in ((first, first_pool), (second, second_pool), (kept, kept_pool)):
        eventually(lambda j=job: admitted(env, namespace, j), 180, f"{job} admitted on its block")
        reservation = purchase(env, pool_name)["reservationId"]
        running = live(ec2, pool_name)
        assert len(running) == 2
        assert {i["CapacityReservationId"] for i in running} == {reservation}

    # The first block's day passes: its gang is released before the end, as planned.
    ends_at = now + 5 * MINUTE + 24 * 3600
    env.advance_clock(ends_at - RELEASE_MARGIN + 5 - emu.now())
    eventually(lambda: live(ec2, first_pool) == [], 120, "the first gang released before the end")
    assert emu.now() < ends_at - 1800  # before EC2's own reclaim
    assert len(bought(env, first_pool)) == 1  # bought once, start to end
    assert len(bought(env, kept_pool)) == 1  # the next gang bought nothing more


def test_with_buying_off_a_gang_that_asks_for_time_is_held_as_a_shortfall(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local(join_delay=0.5)
    emu, ec2 = env.emulator_client, env.ec2_client()
    for zone in sorted({s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}):
        emu.set_capacity(zone, P5, 0)
    emu.add_capacity_block_offering(P5, ZONE, 2, emu.now() + 5 * MINUTE, 24, 100)
    job, pool_name = f"off-{uuid.uuid4().hex[:5]}", f"p5-off-{uuid.uuid4().hex[:5]}"
    asks = {"count": "2", c.ANN_INSTANCE_TYPE: P5, c.ANN_MODE: "fleet"}
    submit(env, namespace, job, pool_name, **asks, **{c.ANN_CAPACITY_BLOCK_DURATION: "24h"})
    eventually(
        lambda: ((pool(env, pool_name) or {}).get("status") or {}).get("consecutiveShortfalls"),
        120,
        lambda: f"a capacity shortfall: {pool(env, pool_name)}",
    )
    assert check_state(workload_of(env, namespace, job)) == c.CheckState.PENDING
    assert live(ec2, pool_name) == [] and bought(env, pool_name) == []
    assert [e["instances"] for e in emu.capacity_block_calendar()] == [2]  # nothing sold


def _claimed_pool(env: Any, namespace: str, job: str) -> str | None:
    """The (derived) pool the Job's Workload claims."""
    wl = workload_of(env, namespace, job)
    if wl is None:
        return None
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    for gnp in custom.list_cluster_custom_object(*GNP)["items"]:
        held = gnp["spec"].get("claim") or {}
        if (held.get("namespace"), held.get("name")) == (namespace, wl["metadata"]["name"]):
            return str(gnp["metadata"]["name"])
    return None


def test_a_queue_whose_class_enables_buying_gets_a_queue_only_job_its_block(
    gang_local: Any, namespace: str
) -> None:
    """The installation grants buying with a cap (100 USD) no offering meets; the class behind
    a queue enables it with its own (800 USD) and a 24h default duration, so a Job that
    carries only the queue label gets the +5 min block (700 USD) bought, once, and runs on it."""
    env = gang_local(
        join_delay=0.5,
        job_run_seconds=7200.0,
        block_purchase={"enabled": True, "maxUpfrontFeePerGang": "100", "latestStart": "1h"},
    )
    emu, ec2 = env.emulator_client, env.ec2_client()
    env.clock.offset = emu.now() - time.time()
    tag = uuid.uuid4().hex[:5]
    name, check, queue = f"buying-{tag}", f"buying-check-{tag}", f"buying-cq-{tag}"
    buying = {
        "instanceType": P5,
        "mode": "fleet",
        "maxLifetime": "48h",
        "capacityBlockDuration": "24h",
        "blockPurchase": {"enabled": True, "maxUpfrontFeePerGang": "800", "latestStart": "1h"},
    }
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    custom.create_cluster_custom_object(*GANG_CLASSES, ko.gang_class(name, buying))
    custom.create_cluster_custom_object(*KUEUE, "admissionchecks", ko.admission_check(check, name))
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", ko.cluster_queue(queue, ko.FLAVOR_NAME, check, ko.LOCAL_QUOTAS)
    )
    custom.create_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", ko.local_queue(namespace, name, queue)
    )
    try:
        wait_until_active(custom, ADMISSION_CHECKS, check, what="the buying class's check Active")
        now = emu.now()
        for start, fee in ((40.0, 450), (5 * MINUTE, 350)):  # 900 USD (over), 700 USD
            emu.add_capacity_block_offering(P5, ZONE, 2, now + start, 24, fee)
        job = f"queue-only-{tag}"
        body = ko.gang_job(namespace, job, name, "unused", 2)
        body["metadata"]["labels"] = {c.QUEUE_NAME_LABEL: name}
        body["metadata"]["annotations"] = {}
        k8s.BatchV1Api(env.control_plane.api_client()).create_namespaced_job(namespace, body)

        pool_name = eventually(lambda: _claimed_pool(env, namespace, job), 120, "the pool")
        intent = eventually(
            lambda: purchase(env, pool_name).get("reservationId") and purchase(env, pool_name),
            120,
            lambda: f"a block bought for {pool_name}: {pool(env, pool_name)}",
        )
        assert Decimal(intent["upfrontFee"]) == 700 and intent["calls"] == 1
        spec = (pool(env, pool_name) or {})["spec"]
        assert spec["gangClass"] == name and spec["capacityBlockDuration"] == "24h0m0s"
        assert spec["fieldSources"]["capacity-block-duration"] == "class"
        assert spec["purchasePolicy"]["maxUpfrontFeePerGang"] == "800"
        [block] = bought(env, pool_name)
        assert _tags(block)[c.TAG_NAMESPACE] == namespace and block["TotalInstanceCount"] == 2
        # Our check on this queue is named for it, so Admitted is read, not the check.
        in_queue = lambda: conditions(workload_of(env, namespace, job)).get(c.WL_ADMITTED)  # noqa: E731
        assert live(ec2, pool_name) == [] and in_queue() != "True"

        env.advance_clock(5 * MINUTE + 5)
        eventually(lambda: in_queue() == "True", 180, f"{job} admitted on its block")
        running = live(ec2, pool_name)
        assert {i["CapacityReservationId"] for i in running} == {intent["reservationId"]}
        assert len(running) == 2 and len(bought(env, pool_name)) == 1
    finally:
        custom.delete_namespaced_custom_object(*KUEUE, namespace, "localqueues", name)
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", queue)
        custom.delete_cluster_custom_object(*KUEUE, "admissionchecks", check)
        custom.delete_cluster_custom_object(*GANG_CLASSES, name)
