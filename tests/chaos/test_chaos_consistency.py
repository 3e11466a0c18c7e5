"""Chaos with EC2's eventual consistency on: the CI-sized run of `test_chaos_kill`, smaller,
with every lag of "Eventual consistency in the Amazon EC2 API" armed for the controller's
client (a listing missing half of each fresh set, NotFound by id, TerminateInstances
answering NotFound and terminating nothing), and every other life's launch answered short
so that a rollback runs right after it.

After every Workload life: the whole invariant check of the chaos suite, and 0 instances of
the pool alive in EC2's own record (`instance_history`, which no lag hides). At the end,
billed and stranded node-seconds come from that record, by the product's one definition.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from devenv.controller_process import EMULATOR_KEYS
from devenv.emulator.consistency import DESCRIBE_BY_ID, LISTING, TERMINATE
from provisioner.api import constants as c
from provisioner.cloud.billing import bill, instance_life
from tests.chaos.harness import ControllerProcess, detached_enis
from tests.chaos.invariants import tag
from tests.chaos.test_chaos_kill import Chaos, N, chaos_env  # noqa: F401  (the fixture)
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

# The windows a lag can reach: a launch and its rollback, the release, and anywhere.
PLAN = ["launch", "ec2-returned", "releasing", "anytime"]
LAG_SECONDS = 8.0
SEED = 20261203


class LaggingChaos(Chaos):
    """Every other life's launch answers one instance short: its rollback meets the lags."""

    def _slow_the_launch(self) -> None:
        super()._slow_the_launch()
        if self.round % 2:
            self.env.emulator.client.set_short_answer("RunInstances", missing=1, count=1)


def _history(env: GangEnv, pool: str) -> list[dict[str, Any]]:
    return [i for i in env.emulator.client.instance_history() if tag(i, c.TAG_POOL) == pool]


def _alive(env: GangEnv, pool: str) -> set[str]:
    return {
        i["InstanceId"] for i in _history(env, pool) if i["State"]["Name"] in ("pending", "running")
    }


@pytest.mark.timeout(1200)
def test_sigkill_with_eventual_consistency_leaks_nothing(
    chaos_env: tuple[GangEnv, ControllerProcess],  # noqa: F811  (the imported fixture)
) -> None:
    env, ctl = chaos_env
    emu = env.emulator.client
    key = EMULATOR_KEYS["AWS_ACCESS_KEY_ID"]  # the controller process's
    emu.set_consistency_lag(LISTING, LAG_SECONDS, client=key, share=0.5)
    emu.set_consistency_lag(DESCRIBE_BY_ID, LAG_SECONDS, client=key)
    emu.set_consistency_lag(TERMINATE, LAG_SECONDS, client=key)
    chaos = LaggingChaos(env, ctl, c.MODE_RUNINSTANCES, SEED, list(PLAN))
    enis_before = detached_enis(env)
    started = time.monotonic()
    while chaos.plan or chaos.pending is not None:
        if chaos.pending is None:
            chaos.arm()
        chaos.one_life()
        chaos.check_invariants(enis_before, satisfied=False)
        eventually(
            lambda: _alive(env, chaos.pool) == set() or None,
            30,
            lambda: f"EC2's record still runs {_alive(env, chaos.pool)} after life {chaos.round}",
        )
    chaos.one_life(finish=False)
    chaos.check_invariants(enis_before, satisfied=True)

    met = {e.get("kind") for e in emu.consumed() if e.get("switch") == "consistency-lag"}
    assert {TERMINATE, DESCRIBE_BY_ID} <= met, f"the lags never bit: {met}"
    lives = (instance_life(i) for i in _history(env, chaos.pool))
    bills = bill(lives, lambda _gang: N, datetime.now(UTC)).values()
    tally = {
        "mode": f"{c.MODE_RUNINSTANCES}+eventual-consistency",
        "kills": ctl.kills,
        "landed": dict(chaos.landed),
        "workload_lives": chaos.round,
        "seconds": round(time.monotonic() - started, 1),
        "billed_node_seconds": round(sum(b.billed for b in bills)),
        "stranded_node_seconds": round(sum(b.stranded for b in bills)),
    }
    print(f"\nchaos tally: {json.dumps(tally)}")
    assert sum(chaos.landed.values()) == len(PLAN), chaos.landed
