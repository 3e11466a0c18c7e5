"""The demo's scene 6: a gang that asks for time, not capacity, and the block bought for it.

Called by `demo._scenario` after the GPU scenes. Its environment buys Capacity Blocks under
a cap (`PURCHASE`). The scene puts three 24 h offerings for 2 x p5.48xlarge on the
emulator's calendar (over the cap soonest, under it later, cheaper latest), says what EC2
offers, submits a Job asking for 24 h (`capacity-block-duration`), shows which offering the
controller bought and why, that the gang is held at $0 until the block starts, then moves
EC2's clock and the controller's to the start together (`LocalEnvironment.advance_clock`,
as the e2e test does) instead of waiting minutes, and shows the gang run on the block. The
pool's `status.blockPurchase` is kept for the bill (`Observer.blocks`), which shows the
upfront fee beside the node-seconds.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.demo_observer import (
    GANG,
    GNP,
    GPU_LIMITS,
    GPU_TYPE,
    KUEUE,
    NAMESPACE,
    DemoFailed,
    JobRecord,
    Observer,
)
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.gangnodepool import BlockPurchase
from provisioner.cloud.block_bill import BoughtBlock

BUY_JOB = "gpu-buy"
BUY_POOL = "gpu-bought"
MAX_FEE = Decimal("800")
# The controller's `blockPurchase` settings for the demo: buying on, capped per gang.
PURCHASE = {"enabled": True, "maxUpfrontFeePerGang": str(MAX_FEE), "latestStart": "1h"}
HOURS = 24
# (seconds from now, USD per instance for the whole block): the soonest is over the cap
# (2 x 450 = 900), the next under it (700), the last under it and cheaper (500) but later.
OFFERS = ((40.0, 450), (300.0, 350), (600.0, 250))


def _when(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(epoch))


def buy_scene(env: LocalEnvironment, obs: Observer) -> None:
    assert env.control_plane is not None
    emu, ec2 = env.emulator_client, env.ec2_client()
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    zone = sorted({s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]})[0]
    now = emu.now()
    for lead, fee in OFFERS:
        emu.add_capacity_block_offering(GPU_TYPE, zone, GANG, now + lead, HOURS, fee)
    print(
        f"\n== 6. buying a block: {GANG} x {GPU_TYPE} for {HOURS} h, as soon as possible, for "
        f"at most {MAX_FEE} USD (blockPurchase.maxUpfrontFeePerGang)",
        flush=True,
    )
    offered = ec2.describe_capacity_block_offerings(
        InstanceType=GPU_TYPE, InstanceCount=GANG, CapacityDurationHours=HOURS
    )["CapacityBlockOfferings"]
    for o in sorted(offered, key=lambda o: o["StartDate"]):
        asked = Decimal(o["UpfrontFee"])
        obs.say(
            f"EC2 offers {o['CapacityBlockOfferingId']} in {o['AvailabilityZone']}: starts "
            f"{o['StartDate']:%H:%M:%S} UTC (in {o['StartDate'].timestamp() - now:.0f}s), "
            f"{asked:.2f} {o['CurrencyCode']} upfront"
            f"{' (over the cap)' if asked > MAX_FEE else ''}"
        )
    obs.jobs[BUY_JOB] = JobRecord(BUY_JOB, BUY_POOL, time.monotonic())
    annotations = {
        c.ANN_INSTANCE_TYPE: GPU_TYPE,
        c.ANN_MODE: c.MODE_FLEET,
        c.ANN_CAPACITY_BLOCK_DURATION: f"{HOURS}h",
        # Longer than the block, so the lifetime limit does not cut it short.
        c.ANN_MAX_LIFETIME: f"{2 * HOURS}h",
    }
    job = ko.gang_job(NAMESPACE, BUY_JOB, ko.QUEUE_NAME, BUY_POOL, GANG, annotations)
    # Its GPUs only: EFA needs the `efa` annotation and its placement, which scene 4 shows.
    limits = {c.RESOURCE_GPU: GPU_LIMITS[c.RESOURCE_GPU]}
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = limits
    obs.batch.create_namespaced_job(NAMESPACE, job)
    obs.say(f"submitted {BUY_JOB} (pool {BUY_POOL}, {GANG} x {GPU_TYPE}, {HOURS} h asked for)")

    def bought() -> BlockPurchase | None:
        raw = obs.pool_status(BUY_POOL).get("blockPurchase")
        block = BlockPurchase.model_validate(raw) if raw else None
        return block if block is not None and block.reservation_id else None

    def held_probe(done: bool) -> bool:
        if obs.live_in(BUY_POOL):
            raise DemoFailed(f"instances of {BUY_POOL} running before its block started")
        return done

    obs.wait("a block bought for the gang", lambda: held_probe(bought() is not None))
    block = bought()
    assert block is not None and block.reservation_id is not None
    obs.blocks[BUY_POOL] = BoughtBlock(
        block.reservation_id,
        BUY_POOL,
        block.instance_count,
        block.starts_at,
        block.ends_at,
        block.upfront_fee,
        block.currency,
    )
    sold = [
        r
        for r in emu.capacity_reservations()
        if {t["Key"]: t["Value"] for t in r.get("Tags") or []}.get(c.TAG_POOL) == BUY_POOL
    ]
    obs.say(
        f"bought {block.offering_id} as {block.reservation_id}: starts "
        f"{block.starts_at:%H:%M:%S} UTC, {block.upfront_fee:.2f} {block.currency} upfront; "
        f"the earliest start under the {MAX_FEE} USD cap (the sooner one is over it, the "
        f"later one cheaper but later); {len(sold)} block bought for {BUY_POOL} "
        f"({block.calls} PurchaseCapacityBlock call)"
    )
    if len(sold) != 1 or block.upfront_fee > MAX_FEE:
        raise DemoFailed(f"{len(sold)} blocks bought for {BUY_POOL}, fee {block.upfront_fee}")
    starts = block.starts_at.timestamp()
    obs.wait(
        f"{BUY_JOB}'s check to name the block's start",
        lambda: held_probe(f"{block.starts_at:%Y-%m-%dT%H:%M}" in _check_message(obs, custom)),
    )
    obs.say(
        f"{BUY_JOB} held at $0 until the block starts: check {obs.workload_check(BUY_JOB)}, "
        f"{obs.live_in(BUY_POOL)} instances running; the check says: "
        f"{_check_message(obs, custom)}"
    )
    ahead = starts - emu.now() + 5
    obs.say(
        f"moving EC2's clock and the controller's {ahead:.0f}s ahead, to "
        f"{_when(starts + 5)} UTC, instead of waiting for the start"
    )
    env.advance_clock(ahead)
    obs.wait(f"{BUY_JOB} to be admitted", lambda: obs.jobs[BUY_JOB].ready_at is not None)
    pages = ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{c.TAG_POOL}", "Values": [BUY_POOL]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    on = {i.get("CapacityReservationId") for r in pages for i in r["Instances"]}
    count = sum(len(r["Instances"]) for r in pages)
    if count != GANG or on != {block.reservation_id}:
        raise DemoFailed(f"{BUY_JOB} admitted on {count} instances in {on}")
    obs.say(f"{BUY_JOB} admitted: {GANG} x {GPU_TYPE} in the bought block {block.reservation_id}")
    obs.wait(f"{BUY_JOB} to complete", lambda: obs.jobs[BUY_JOB].done_at is not None)
    custom.delete_cluster_custom_object(*GNP, BUY_POOL)
    obs.wait(
        f"pool {BUY_POOL} released",
        lambda: not obs.live_in(BUY_POOL) and not obs.pool_status(BUY_POOL),
    )


def _check_message(obs: Observer, custom: Any) -> str:
    """Our check's message on the gang's Workload ("" before it has one)."""
    for wl in custom.list_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads")["items"]:
        if any(o.get("name") == BUY_JOB for o in wl["metadata"].get("ownerReferences") or []):
            for entry in (wl.get("status") or {}).get("admissionChecks", []):
                if entry["name"] == ko.CHECK_NAME:
                    return str(entry.get("message") or "")
    return ""
