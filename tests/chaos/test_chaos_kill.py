"""Chaos: the controller is SIGKILLed at chosen moments of a pool's life and started again.

A seeded generator picks, for each kill, a window: during a launch (marker persisted, call
in flight), after EC2 returned but before the IDs were persisted, during a Pulumi `up` or
`destroy`, while nodes join, during a release, or at a random moment. The test drives gang
Workloads through their whole life (claim, N-or-0 launch, join, Ready, finish, keep-warm
expiry, release) with the Kueue stand-in, watches the pool status, EC2 and the controller's
process group for the chosen window, kills the whole process group, and starts a new
controller after a random pause. Once the kills are spent, a last Workload per mode must
become Ready and, after a reaper sweep, these must hold:
- the pool is Satisfied with exactly N instances (no pool stuck);
- no (pool, generation) ever launched more than N instances;
- no live managed instance outside a pool's status.instanceIds;
- the stack's recorded instance set equals what EC2 runs;
- no detached ENI was left behind.
Between Workloads every released pool must hold 0 instances (N-or-0).

`ATOMIC_GANG_CHAOS_KILLS` is the total number of kills, split over the two modes (default
6: the CI-sized run in the test command); `make chaos` sets 100 and prints the tally.
`ATOMIC_GANG_CHAOS_SEED` replays one run.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.api import constants as c
from tests.chaos.harness import (
    ControllerProcess,
    converged_problems,
    detached_enis,
    first,
    live_ids,
    settings_file,
    status,
    tag,
)
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

KILLS = int(os.environ.get("ATOMIC_GANG_CHAOS_KILLS", "6"))
SEED = int(os.environ.get("ATOMIC_GANG_CHAOS_SEED", "20261129"))
N = 3
WINDOWS = ("launch", "ec2-returned", "pulumi", "joining", "releasing", "anytime")
STAGE_TIMEOUT = 180.0
# One Workload life takes tens of seconds; a window that never shows in a few rounds (a
# launch too fast to see) falls back to a random moment rather than spinning forever.
MAX_ROUNDS_PER_KILL = 3
REPORT = os.environ.get("ATOMIC_GANG_CHAOS_REPORT")


class Chaos:
    """One mode's run: drives Workloads, kills in windows, restarts, keeps the tally."""

    def __init__(self, env: GangEnv, ctl: ControllerProcess, mode: str, seed: int) -> None:
        self.env, self.ctl, self.mode = env, ctl, mode
        self.rng = random.Random(seed)
        self.pool = f"chaos-{mode}"
        self.pending: str | None = None
        self.pending_since_round = 0
        self.round = 0
        self.t_round = 0.0
        self.anytime_at = 0.0
        self.hits: Counter[str] = Counter()
        self.fallbacks = 0
        self.recovery_seconds: list[float] = []

    # -- windows ---------------------------------------------------------------------------
    def _in(self, window: str) -> bool:
        st = first(lambda: status(self.env, self.pool)) or {}
        if window == "launch":
            return st.get("launchInProgress") is not None
        if window == "ec2-returned":
            marker = st.get("launchInProgress")
            if not marker or st.get("instanceIds"):
                return False
            live = first(lambda: self.env.live_instances(self.pool)) or []
            return any(tag(i, c.TAG_GROUP) == marker.get("group") for i in live)
        if window == "pulumi":
            return bool(self.ctl.pulumi_operations() & {"up", "destroy"})
        if window == "joining":
            return st.get("phase") == c.PHASE_JOINING
        if window == "releasing":
            return st.get("phase") == c.PHASE_RELEASING or bool(st.get("releaseInProgress"))
        return time.monotonic() >= self.anytime_at

    def arm(self) -> None:
        self.pending = self.rng.choice(WINDOWS)
        self.pending_since_round = self.round
        self.anytime_at = time.monotonic() + self.rng.uniform(0.0, 8.0)

    def _maybe_kill(self) -> None:
        if self.pending is None or not self._in(self.pending):
            return
        # A little jitter so a kill lands anywhere inside the window, not only at its start.
        time.sleep(self.rng.uniform(0.0, 0.4))
        self.ctl.kill()
        self.hits[self.pending] += 1
        time.sleep(self.rng.uniform(0.0, 1.5))
        self.ctl.start()
        self.pending = None

    def wait(self, goal: Any, what: str) -> Any:
        """Poll `goal` while watching for the armed window; fail with the controller's log."""
        deadline = time.monotonic() + STAGE_TIMEOUT
        while time.monotonic() < deadline:
            self._maybe_kill()
            if not self.ctl.alive():
                raise AssertionError(f"[{self.mode}] controller exited:\n{self.ctl.log_tail()}")
            reached = first(goal)
            if reached:
                return reached
            time.sleep(0.05)
        st = first(lambda: status(self.env, self.pool))
        raise AssertionError(
            f"[{self.mode}] stuck: {what} not reached in {STAGE_TIMEOUT:.0f}s; pool status "
            f"{json.dumps(st, default=str)[:1500]}\ncontroller log:\n{self.ctl.log_tail()}"
        )

    # -- one Workload's life ---------------------------------------------------------------
    def one_life(self, finish: bool = True) -> str:
        self.round += 1
        if self.pending is not None and self.round - self.pending_since_round > MAX_ROUNDS_PER_KILL:
            self.pending = "anytime"
            self.fallbacks += 1
        env = self.env
        annotations = {c.ANN_MODE: self.mode, c.ANN_KEEP_WARM_TTL: "1s"}
        workload = env.submit(f"{self.mode}-{self.round}", self.pool, count=N, **annotations)
        t0 = time.monotonic()
        self.wait(
            lambda: (s := env.check(workload)) and s["state"] == c.CHECK_READY,
            f"check Ready on {workload}",
        )
        self.recovery_seconds.append(time.monotonic() - t0)
        st = status(env, self.pool)
        assert st["phase"] == c.PHASE_SATISFIED and len(st["instanceIds"]) == N, st
        if not finish:
            return workload
        env.kueue.finish(env.namespace, workload)
        self.wait(
            lambda: (
                status(env, self.pool).get("phase") == c.PHASE_IDLE
                and not status(env, self.pool).get("instanceIds")
                and not live_ids(env, self.pool)
            ),
            f"pool {self.pool} released to Idle with 0 instances",
        )
        return workload


@pytest.fixture
def chaos_env(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> Iterator[tuple[GangEnv, ControllerProcess]]:
    # The harness's in-process controller stays unstarted: only the child process runs.
    env: GangEnv = gang_env_factory(join_delay=1.5, start_controller=False)
    config = settings_file(tmp_path / "settings.yaml", env)
    ctl = ControllerProcess(
        control_plane.info.kubeconfig, pulumi_tool.binary.parent.parent, config, tmp_path
    )
    ctl.start()
    yield env, ctl
    ctl.stop()


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("mode", [c.MODE_RUNINSTANCES, c.MODE_FLEET])
def test_sigkill_anywhere_leaves_no_stray_or_double_launch(
    chaos_env: tuple[GangEnv, ControllerProcess], mode: str
) -> None:
    env, ctl = chaos_env
    kills = (KILLS + (1 if mode == c.MODE_RUNINSTANCES else 0)) // 2
    chaos = Chaos(env, ctl, mode, SEED + (0 if mode == c.MODE_RUNINSTANCES else 1))
    enis_before = detached_enis(env)
    started = time.monotonic()
    while ctl.kills < kills:
        if chaos.pending is None:
            chaos.arm()
        before = ctl.kills
        chaos.one_life()
        # N-or-0 between Workloads: the pool released everything it had.
        assert live_ids(env, chaos.pool) == set()
        if ctl.kills != before:  # progress for the long run (shown with -s)
            print(
                f"chaos {mode}: {ctl.kills}/{kills} kills, {chaos.round} Workload lives, "
                f"{time.monotonic() - started:.0f}s",
                flush=True,
            )
    chaos.pending = None
    chaos.one_life(finish=False)

    # Let the reaper sweep (every 3 s) and any last stack record settle, then judge.
    time.sleep(7)
    eventually(
        lambda: converged_problems(env, {chaos.pool: N}, enis_before) == [] or None,
        60,
        lambda: (
            "; ".join(converged_problems(env, {chaos.pool: N}, enis_before))
            + f"\ncontroller log:\n{ctl.log_tail()}"
        ),
        every=1.0,
    )
    tally = {
        "mode": mode,
        "kills": ctl.kills,
        "windows": dict(chaos.hits),
        "fallbacks_to_random_moment": chaos.fallbacks,
        "workload_lives": chaos.round,
        "seconds": round(time.monotonic() - started, 1),
        "submit_to_ready_seconds_max": round(max(chaos.recovery_seconds), 1),
        "submit_to_ready_seconds_median": round(
            sorted(chaos.recovery_seconds)[len(chaos.recovery_seconds) // 2], 1
        ),
        "invariants": "all held",
    }
    print(f"\nchaos tally: {json.dumps(tally)}")
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as out:
            out.write(json.dumps(tally) + "\n")
