"""A controller process SIGKILLed right after its PurchaseCapacityBlock call: EC2 bought the
block, the answer never reached anyone, and the next controller must not buy a second one.

PurchaseCapacityBlock takes no ClientToken, so the only record of the call the dead process
made is the intent it wrote to the pool's status before calling, and the tag the block
carries. The emulator runs the purchase and then holds its answer (`delay_calls(...,
after=True)`); the controller is killed while it waits. A new controller process finds the
intent without a reservation, lists the block tagged with it, adopts it, and the gang runs
on it at its start. EC2's own record (the reservations it holds and the purchase calls it
received) shows one block and one call.

Where the kill landed is read from the pool's status once the process is gone (its state
frozen), so a kill that missed the window fails the test instead of passing it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.controller_process import EMULATOR_KEYS
from provisioner.api import constants as c
from tests.integration.controller_harness import GangEnv, eventually
from tests.integration.test_controller_failover import Replicas

POOL = "pool-purchase-crash"
P5 = "p5.48xlarge"
N = 2
# The block starts this long after the test seeds it: long enough for the purchase, the
# kill and the second controller's adoption, short enough to wait for in real time.
STARTS_IN = 75.0
# EC2 holds the purchase's answer this long after buying: the window the kill aims at.
ANSWER_HELD_SECONDS = 30.0


@pytest.fixture
def replicas(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> Iterator[Replicas]:
    # Only the processes run the controller; the harness's node simulator joins the set.
    env: GangEnv = gang_env_factory(join_delay=0.5, start_controller=False)
    made = Replicas(
        env,
        control_plane,
        pulumi_tool,
        tmp_path,
        retryBackoff={"initial": "500ms", "max": "4s"},
        blockPurchase={"enabled": True, "maxUpfrontFeePerGang": "800", "latestStart": "1h"},
    )
    yield made
    made.stop()


def _purchase(env: GangEnv) -> dict[str, Any]:
    return dict(((env.pool(POOL) or {}).get("status") or {}).get("blockPurchase") or {})


def _bought(env: GangEnv) -> list[dict[str, Any]]:
    """The reservations EC2 holds for the pool: what was bought, whatever anyone heard."""
    emu = env.emulator.client
    return [
        r
        for r in emu.capacity_reservations()
        if {t["Key"]: t["Value"] for t in r.get("Tags") or []}.get(c.TAG_POOL) == POOL
    ]


def _purchase_calls(env: GangEnv) -> int:
    """PurchaseCapacityBlock calls EC2 received (its write log, as CloudTrail keeps it)."""
    writes = env.emulator.client.ec2_writes()
    return [w["action"] for w in writes].count("PurchaseCapacityBlock")


def test_a_controller_killed_right_after_its_purchase_call_buys_one_block(
    replicas: Replicas,
) -> None:
    env = replicas.env
    emu = env.emulator.client
    zone = sorted({s["AvailabilityZone"] for s in env.ec2.describe_subnets()["Subnets"]})[0]
    # 2 x 350 = 700 USD: under the 800 USD cap.
    emu.add_capacity_block_offering(P5, zone, N, emu.now() + STARTS_IN, 24, 350)
    # EC2 buys, then holds the answer: only the controllers' calls (signed with their key).
    emu.delay_calls(
        "PurchaseCapacityBlock",
        ANSWER_HELD_SECONDS,
        after=True,
        client=EMULATOR_KEYS["AWS_ACCESS_KEY_ID"],
    )
    first = replicas.start("replica-a")
    workload = env.submit(
        "purchase-crash",
        POOL,
        count=N,
        **{
            c.ANN_INSTANCE_TYPE: P5,
            c.ANN_MODE: "fleet",
            c.ANN_MAX_LIFETIME: "48h",
            c.ANN_CAPACITY_BLOCK_DURATION: "24h",
        },
    )

    # The kill: once EC2 holds the block and the answer is still on its way.
    eventually(
        lambda: _purchase(env).get("intent") and _bought(env) and _purchase_calls(env) == 1,
        180,
        lambda: f"the purchase made, its answer held: {_purchase(env)}",
    )
    first.kill()
    frozen = _purchase(env)
    assert frozen.get("intent") and not frozen.get("reservationId"), (
        f"the kill missed the window between the call and its answer: {frozen}"
    )
    [block] = _bought(env)
    tags = {t["Key"]: t["Value"] for t in block.get("Tags") or []}
    assert tags.get(c.TAG_PURCHASE_INTENT) == frozen["intent"], tags

    # The next controller adopts the block by its intent's tag: no second call.
    replicas.start("replica-b")
    adopted = eventually(
        lambda: _purchase(env).get("reservationId"),
        120,
        lambda: f"the block adopted by the next controller: {_purchase(env)}",
    )
    assert adopted == block["CapacityReservationId"]
    assert _purchase_calls(env) == 1, emu.ec2_writes()
    assert len(_bought(env)) == 1

    # At its start the gang runs on it: the one block EC2 sold, N instances in it.
    env.wait_check(workload, c.CheckState.READY, timeout=STARTS_IN + 180)
    running = env.live_instances(POOL)
    assert len(running) == N
    assert {i.get("CapacityReservationId") for i in running} == {adopted}
    assert len(_bought(env)) == 1 and _purchase_calls(env) == 1
