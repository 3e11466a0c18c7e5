"""EC2's eventual consistency switched on for the controller's client, against the
in-process controller of `tests/integration/controller_harness.py`.

"Eventual consistency in the Amazon EC2 API": right after a launch a listing may miss part
of the set, DescribeInstances by id may answer NotFound, and TerminateInstances may answer
NotFound without terminating anything. All three are armed at once, scoped to the
controller's access key (the node simulator, which stands in for the machines themselves,
is not affected), for a rollback right after a launch and for a release right after one.

After every release and rollback, what EC2 runs is read from its own record of every
instance (`instance_history`, which no lag hides and which keeps instances that aged out of
its answers), and so are the billed and stranded node-seconds, by the product's one
definition (`provisioner/cloud/billing.py`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devenv.emulator.consistency import DESCRIBE_BY_ID, LISTING, TERMINATE
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud.billing import bill, instance_life
from tests.chaos.harness import assert_clean, detached_enis, launches_per_group, status
from tests.chaos.invariants import Expect
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

N = 2


def arm(env: GangEnv, seconds: float) -> None:
    """All three lags for the controller's client (the in-process controller signs with the
    process's default credentials), half of each fresh set missing from its listings."""
    emu = env.emulator.client
    controller_key = os.environ["AWS_ACCESS_KEY_ID"]
    emu.set_consistency_lag(LISTING, seconds, client=controller_key, share=0.5)
    emu.set_consistency_lag(DESCRIBE_BY_ID, seconds, client=controller_key)
    emu.set_consistency_lag(TERMINATE, seconds, client=controller_key)


def history(env: GangEnv, pool: str) -> list[dict[str, Any]]:
    """EC2's own record of every instance of `pool`, whatever its answers show now."""
    return [
        i
        for i in env.emulator.client.instance_history()
        if {t["Key"]: t["Value"] for t in i["Tags"]}.get(c.TAG_POOL) == pool
    ]


def alive(env: GangEnv, pool: str) -> set[str]:
    return {
        i["InstanceId"] for i in history(env, pool) if i["State"]["Name"] in ("pending", "running")
    }


def billed(env: GangEnv, pool: str) -> tuple[float, float]:
    """(billed, stranded) node-seconds of `pool`, from EC2's history."""
    lives = (instance_life(i) for i in history(env, pool))
    bills = bill(lives, lambda _gang: N, datetime.now(UTC)).values()
    return sum(b.billed for b in bills), sum(b.stranded for b in bills)


def most_alive_at_once(env: GangEnv, pool: str) -> int:
    """The most instances of `pool` EC2 ran at one moment, from its history (EC2 reports
    times to the second, so lives that touch within a second do not count as overlapping)."""
    now = datetime.now(UTC)
    lives = [instance_life(i) for i in history(env, pool)]
    spans = [(life.launched, life.ended or now) for life in lives]
    tolerance = timedelta(seconds=1)
    return max(
        (
            sum(1 for start, end in spans if start <= moment < end - tolerance)
            for moment, _ in spans
        ),
        default=0,
    )


def lag_consumed(env: GangEnv) -> set[str]:
    """Which of EC2's NotFound answers the controller met (the lags actually bit)."""
    return {
        str(e.get("kind"))
        for e in env.emulator.client.consumed()
        if e.get("switch") == "consistency-lag"
    }


def release_and_check(env: GangEnv, workload: str, pool: str, enis: set[str]) -> None:
    env.kueue.finish(env.namespace, workload)
    env.wait_phase(pool, Phase.IDLE, timeout=150)
    eventually(lambda: alive(env, pool) == set() or None, 30, "no instance of the pool alive")
    total, stranded = billed(env, pool)
    assert total > 0 and 0 <= stranded <= total, (total, stranded)
    assert_clean(env, {pool: Expect(N, satisfied=False)}, enis)


def test_a_rollback_right_after_launch_leaves_nothing_running(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    arm(env, 10.0)
    emu.set_short_answer("RunInstances", missing=1, count=1)
    workload = env.submit("ecroll", "pool-ecroll", count=N, **{c.ANN_KEEP_WARM_TTL: "1s"})

    # The rollback's terminate met NotFound: the pool kept the ids and released them.
    env.wait_check(workload, c.CheckState.READY, timeout=180)
    st = status(env, "pool-ecroll")
    assert alive(env, "pool-ecroll") == set(st["instanceIds"]), "the rolled-back set still runs"
    # N-or-0 in EC2's own record: the rolled-back instances were gone before the next set
    # was launched, never alive beside it.
    assert most_alive_at_once(env, "pool-ecroll") <= N, "a rolled-back set ran beside the next"
    per_group = launches_per_group(env)
    assert len({g for (p, g) in per_group if p == "pool-ecroll"}) >= 2, per_group
    assert {TERMINATE, DESCRIBE_BY_ID} <= lag_consumed(env), emu.consumed()
    release_and_check(env, workload, "pool-ecroll", enis)


def test_a_release_right_after_launch_leaves_nothing_running(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0)
    enis = detached_enis(env)
    # Longer than the harness's join deadline (20 s): the set that never joins is released
    # while EC2 still answers NotFound for it.
    arm(env, 45.0)
    workload = env.submit("ecrel", "pool-ecrel", count=N, **{c.ANN_KEEP_WARM_TTL: "1s"})
    joining = env.wait_phase("pool-ecrel", Phase.JOINING, timeout=120)
    first_set = set(joining["status"]["instanceIds"])
    env.nodes.refuse_join(*first_set)
    env.nodes.join_delay = 0.5
    # The first set is released while EC2 still answers NotFound for it. After that, lags
    # shorter than the join deadline: a listing that hides half of every fresh set for
    # longer than the deadline would release every set before the controller saw it whole
    # (the node simulator signs with its own key and joins the nodes at once).
    eventually(
        lambda: not first_set & alive(env, "pool-ecrel"), 120, "the never-joining set released"
    )
    arm(env, 5.0)

    env.wait_check(workload, c.CheckState.READY, timeout=240)
    assert not first_set & alive(env, "pool-ecrel"), "the released set still runs"
    assert TERMINATE in lag_consumed(env), env.emulator.client.consumed()
    release_and_check(env, workload, "pool-ecrel", enis)
