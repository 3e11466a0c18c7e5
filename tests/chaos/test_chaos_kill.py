"""Chaos: the controller is SIGKILLed at chosen moments of a pool's life and started again.

Each kill aims at a window: during a launch (marker persisted, the call held in EC2), after EC2
launched but before the IDs were persisted, during a Pulumi `up` or `destroy`, while nodes
join, once the pool is Satisfied but the stack's record of its set is not yet written
("satisfied-unrecorded"), while that record's `up` runs after the Workload was admitted
("record-in-flight"), during a release, or at a random moment. The two record windows are
the ones Ready-not-gated-on-the-record opened (issue #14): admission no longer waits for
the record, so a crash can leave an admitted gang whose stack does not know its set.
The test drives gang Workloads through their whole life (claim, N-or-0 launch, join, Ready,
finish, keep-warm expiry, release) with the Kueue stand-in, watches for the aimed window,
and SIGKILLs the controller's whole process tree (the Pulumi provider host, which runs in a
process group of its own, included). Then, with the controller dead and its state frozen,
it reads the pool status, EC2 and the stack operation marker again and records the window
the kill actually *landed* in; a kill that landed elsewhere is counted as a miss and the
same window is aimed at again. A kill counts as landed in "launch" only by EC2's own record
(tests/chaos/landing.py): the emulator took the controller's launch call into its hold and
had not run it, so a kill after the marker was saved and before the call was sent is a miss.

After every Workload life the whole invariant check runs (tests/chaos/invariants.py): the
released pool holds 0 instances, EC2 and the stack agree, no stray instance, no generation
over N, no leaked ENI. After the last life the pool must be Satisfied with exactly N.

`ATOMIC_GANG_CHAOS_KILLS` is the number of landed kills aimed at, split over the two modes.
The default (the CI-sized run in the test command) aims once at every window in each mode,
in a fixed order, and fails unless each landed; `make chaos` sets 100 and requires at least
`MIN_LANDED_FULL` landed kills per window and mode. `ATOMIC_GANG_CHAOS_SEED` replays the
order and pauses of a full run.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devenv.controller_process import EMULATOR_KEYS
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud.billing import Gang, bill, instance_life
from provisioner.pulumi_driver.cli_env import StatePaths
from provisioner.pulumi_driver.oplog import OperationLog
from tests.chaos.harness import (
    ControllerProcess,
    converged_problems,
    detached_enis,
    first,
    live_ids,
    settings_file,
    status,
)
from tests.chaos.invariants import Expect, cost_problems, tag
from tests.chaos.landing import IN_FLIGHT, launch_record, launch_window
from tests.integration.controller_harness import GangEnv, eventually
from tests.support.ec2_listing import described_instances

pytestmark = pytest.mark.integration

WINDOWS = (
    "launch",
    "ec2-returned",
    "pulumi",
    "joining",
    "satisfied-unrecorded",
    "record-in-flight",
    "releasing",
    "anytime",
)
# Windows after admission, before the stack's record of the set is written.
RECORD_WINDOWS = ("satisfied-unrecorded", "record-in-flight")
KILLS = int(os.environ.get("ATOMIC_GANG_CHAOS_KILLS", str(2 * len(WINDOWS))))
SEED = int(os.environ.get("ATOMIC_GANG_CHAOS_SEED", "20261129"))
N = 3
STAGE_TIMEOUT = 180.0
# Aims at one window before the run gives up on it and fails: a window that cannot be
# landed in is a finding, not something to paper over with a random kill.
MAX_AIMS_PER_WINDOW = 8
# The full run's floor of landed kills per window and mode (50 kills spread over 8).
MIN_LANDED_FULL = 4
# How long after spotting a window the kill waits: enough to land anywhere inside a long
# window, none for the short ones (a launch call, the gap before the IDs are saved).
# A launch call and the gap between EC2's answer and the status write last milliseconds; to
# land kills there, the emulator holds the controller's launch call that long, before EC2
# runs it ("launch") or after it ran and before the answer leaves ("ec2-returned"), as a
# slow EC2 answer would. The hold is scoped to the controller's access key; the "launch"
# kill waits until the emulator has taken the call into it. Where the kill landed is still
# read from the frozen state and the emulator's logs.
SLOW_LAUNCH_SECONDS = 1.5
LAUNCH_ACTION = {c.MODE_RUNINSTANCES: "RunInstances", c.MODE_FLEET: "CreateFleet"}
# The record `up` and the join race: a quick record is written before the nodes are Ready,
# and nothing is left to land in. When a record window is aimed at, the emulator holds the
# first S3 writes the controller's Pulumi CLI makes once this life's launch has started
# (the prepare has finished by then, so they are the record's lock and checkpoints) for
# 1 s each, as a slow state backend would.
SLOW_RECORD_WRITES = 3
SLOW_RECORD_SECONDS = 1.0
JITTER = {
    "launch": 0.0,
    "ec2-returned": 0.0,
    "pulumi": 0.3,
    "joining": 0.4,
    "satisfied-unrecorded": 0.2,
    "record-in-flight": 0.2,
    "releasing": 0.2,
}
REPORT = os.environ.get("ATOMIC_GANG_CHAOS_REPORT")


def kill_plan(kills: int, seed: int) -> list[str]:
    """The windows to land kills in, in order: each window in turn, so every window gets
    its share; a run larger than one round is shuffled by the seed, round by round."""
    rng = random.Random(seed)
    plan: list[str] = []
    while len(plan) < kills:
        round_ = list(WINDOWS)
        if kills > len(WINDOWS):
            rng.shuffle(round_)
        plan.extend(round_)
    return plan[:kills]


class Chaos:
    """One mode's run: drives Workloads, kills in windows, restarts, keeps the tally."""

    def __init__(
        self, env: GangEnv, ctl: ControllerProcess, mode: str, seed: int, plan: list[str]
    ) -> None:
        self.env, self.ctl, self.mode = env, ctl, mode
        self.rng = random.Random(seed)
        self.pool = f"chaos-{mode}"
        self.plan = list(plan)
        self.pending: str | None = None
        self.workload: str | None = None
        self.record_slowed = False
        # Lengths of the emulator's consumed-call and launch logs when this life began.
        self.consumed_mark = 0
        self.launches_mark = 0
        self.aims = 0
        # Workload lives begun with the pending window armed: a window never entered (a
        # launch hold that never reached EC2) fails the run instead of looping on.
        self.lives_aimed = 0
        self.round = 0
        self.anytime_at = 0.0
        self.landed: Counter[str] = Counter()
        # The gangs a Workload was admitted onto (the active group when its check went Ready).
        self.served: set[Gang] = set()
        self.misses: Counter[str] = Counter()
        self.anytime_landed_in: Counter[str] = Counter()
        self.recovery_seconds: list[float] = []
        self.oplog = OperationLog(StatePaths(env.settings.pulumi.state_dir).operations)

    # -- windows ---------------------------------------------------------------------------
    def _in(self, window: str) -> bool:
        """Whether the live controller is in `window` now (worth killing)."""
        st = first(lambda: status(self.env, self.pool)) or {}
        if window == "launch":
            # Killed only while EC2 holds the call: a saved marker alone may precede it.
            return (
                st.get("launchInProgress") is not None
                and not st.get("instanceIds")
                and first(lambda: self._launch_landing(st)) == IN_FLIGHT
            )
        if window == "ec2-returned":
            return self._launched_unrecorded(st)
        if window == "pulumi":
            return bool(self.ctl.pulumi_operations() & {"up", "destroy"})
        if window == "joining":
            return st.get("phase") == Phase.JOINING
        if window == "satisfied-unrecorded":
            return self._satisfied_unrecorded(st)
        if window == "record-in-flight":
            return self._record_in_flight(st)
        if window == "releasing":
            return st.get("phase") == Phase.RELEASING or bool(st.get("releaseInProgress"))
        return time.monotonic() >= self.anytime_at

    def _launched_unrecorded(self, st: dict[str, Any]) -> bool:
        """EC2 runs instances of the generation being launched, the status has no IDs."""
        marker = st.get("launchInProgress")
        if not marker or st.get("instanceIds"):
            return False
        live = first(lambda: self.env.live_instances(self.pool)) or []
        return any(tag(i, c.TAG_GROUP) == marker.get("group") for i in live)

    def _launch_landing(self, st: dict[str, Any]) -> str:
        """Where a launch with its marker saved stands, by EC2's own record of this life
        (tests/chaos/landing.py): in flight only when the emulator took the controller's
        call into its hold and has not run it yet."""
        client = self.env.emulator.client
        action = LAUNCH_ACTION[self.mode]
        record = launch_record(
            client.consumed()[self.consumed_mark :],
            len(client.launch_requests(action)) - self.launches_mark,
            action,
            EMULATOR_KEYS["AWS_ACCESS_KEY_ID"],
            group_live=self._launched_unrecorded(st),
        )
        return launch_window(record)

    def _satisfied_unrecorded(self, st: dict[str, Any]) -> bool:
        """The pool is Satisfied (its check goes Ready on it) and its stack has no record of
        the active set yet."""
        recorded = st.get("activeGroup") is not None and st.get("recordedGroup") == st.get(
            "activeGroup"
        )
        return st.get("phase") == Phase.SATISFIED and not recorded

    def _record_in_flight(self, st: dict[str, Any]) -> bool:
        """The Workload is admitted (our check Ready) while the record `up` runs: the
        driver's marker for a record is written and has no result."""
        if not self._satisfied_unrecorded(st) or self.workload is None:
            return False
        check = first(lambda: self.env.check(self.workload or "")) or {}
        op = self.oplog.last(self.pool)
        return (
            check.get("state") == c.CheckState.READY
            and op is not None
            and op.in_progress
            and op.operation == "record"
        )

    def where_landed(self) -> set[str]:
        """With the controller dead and its state frozen: every window the kill is in (a
        stack record runs while nodes join, so one kill can be in two)."""
        st = first(lambda: status(self.env, self.pool)) or {}
        found: set[str] = set()
        if st.get("launchInProgress") is not None and not st.get("instanceIds"):
            found.add(first(lambda: self._launch_landing(st)) or "launch-unread")
        op = self.oplog.last(self.pool)
        if op is not None and op.in_progress:
            found.add("pulumi")
        if st.get("phase") == Phase.RELEASING or st.get("releaseInProgress"):
            found.add("releasing")
        if st.get("phase") == Phase.JOINING:
            found.add("joining")
        if self._satisfied_unrecorded(st):
            found.add("satisfied-unrecorded")
        if self._record_in_flight(st):
            found.add("record-in-flight")
        return found or {f"other:{st.get('phase')}"}

    def arm(self) -> None:
        self.pending = self.plan.pop(0)
        self.aims = 0
        self.lives_aimed = 0
        self.anytime_at = time.monotonic() + self.rng.uniform(0.0, 8.0)

    def _slow_the_record(self) -> None:
        """Once this life's launch has started, arm the emulator to hold the record's S3
        writes when a record window is aimed at (armed earlier, a prepare would take them)."""
        if self.record_slowed or self.pending not in RECORD_WINDOWS:
            return
        st = first(lambda: status(self.env, self.pool)) or {}
        if st.get("launchInProgress") is None and not st.get("instanceIds"):
            return
        self.env.emulator.client.delay_calls(
            "PutObject",
            SLOW_RECORD_SECONDS,
            count=SLOW_RECORD_WRITES,
            client=EMULATOR_KEYS["AWS_ACCESS_KEY_ID"],
        )
        self.record_slowed = True

    def _maybe_kill(self) -> None:
        self._slow_the_record()
        if self.pending is None or not self._in(self.pending):
            return
        time.sleep(self.rng.uniform(0.0, JITTER.get(self.pending, 0.0)))
        self.ctl.kill()
        where = self.where_landed()
        self.aims += 1
        if self.pending == "anytime":
            self.landed["anytime"] += 1
            self.anytime_landed_in["+".join(sorted(where))] += 1
            self.pending = None
        elif self.pending in where:
            self.landed[self.pending] += 1
            self.pending = None
        else:
            self.misses[f"{self.pending}->{'+'.join(sorted(where))}"] += 1
            if self.aims >= MAX_AIMS_PER_WINDOW:
                raise AssertionError(
                    f"[{self.mode}] no kill landed in {self.pending} after {self.aims} aims: "
                    f"{dict(self.misses)}"
                )
        time.sleep(self.rng.uniform(0.0, 1.5))
        self.ctl.start()

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
    def _slow_the_launch(self) -> None:
        """Arm the emulator to hold this life's launch call when a launch window is aimed
        at (and forget what an earlier life armed)."""
        client = self.env.emulator.client
        client.clear_faults()
        self.record_slowed = False
        self.consumed_mark = len(client.consumed())
        self.launches_mark = len(client.launch_requests(LAUNCH_ACTION[self.mode]))
        if self.pending in ("launch", "ec2-returned"):
            client.delay_calls(
                LAUNCH_ACTION[self.mode],
                SLOW_LAUNCH_SECONDS,
                after=self.pending == "ec2-returned",
                client=EMULATOR_KEYS["AWS_ACCESS_KEY_ID"],
            )

    def one_life(self, finish: bool = True) -> str:
        self.round += 1
        if self.pending is not None:
            self.lives_aimed += 1
            if self.lives_aimed > MAX_AIMS_PER_WINDOW:
                raise AssertionError(
                    f"[{self.mode}] {self.pending} was not entered in {MAX_AIMS_PER_WINDOW} "
                    f"Workload lives ({self.aims} kills, misses {dict(self.misses)})"
                )
        env = self.env
        self._slow_the_launch()
        annotations = {c.ANN_MODE: self.mode, c.ANN_KEEP_WARM_TTL: "1s"}
        workload = env.submit(f"{self.mode}-{self.round}", self.pool, count=N, **annotations)
        self.workload = workload
        t0 = time.monotonic()
        self.wait(
            lambda: (s := env.check(workload)) and s["state"] == c.CheckState.READY,
            f"check Ready on {workload}",
        )
        self.recovery_seconds.append(time.monotonic() - t0)
        st = status(env, self.pool)
        assert st["phase"] == Phase.SATISFIED and len(st["instanceIds"]) == N, st
        self.served.add(Gang(self.pool, st.get("activeGroup")))
        if self.pending in RECORD_WINDOWS:
            # Admitted; the record windows lie between here and the record written.
            self.wait(
                lambda: (s := status(env, self.pool)).get("recordedGroup") == s.get("activeGroup"),
                f"the active set of {self.pool} recorded in its stack",
            )
        if not finish:
            return workload
        env.kueue.finish(env.namespace, workload)
        self.wait(
            lambda: (
                status(env, self.pool).get("phase") == Phase.IDLE
                and not status(env, self.pool).get("instanceIds")
                and not live_ids(env, self.pool)
            ),
            f"pool {self.pool} released to Idle with 0 instances",
        )
        return workload

    def check_invariants(self, enis_before: set[str], satisfied: bool) -> None:
        """The whole check, after every life: N-or-0, stack == EC2, no stray, no generation
        over N, no leaked ENI. Waits for the reaper and a last stack record to settle."""
        expect = {self.pool: Expect(N, satisfied=satisfied)}
        eventually(
            lambda: converged_problems(self.env, expect, enis_before) == [] or None,
            60,
            lambda: (
                f"[{self.mode}] after life {self.round}: "
                + "; ".join(converged_problems(self.env, expect, enis_before))
                + f"\ncontroller log:\n{self.ctl.log_tail()}"
            ),
            every=1.0,
        )


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
    seed = SEED + (0 if mode == c.MODE_RUNINSTANCES else 1)
    kills = (KILLS + (1 if mode == c.MODE_RUNINSTANCES else 0)) // 2
    chaos = Chaos(env, ctl, mode, seed, kill_plan(kills, seed))
    enis_before = detached_enis(env)
    started = time.monotonic()
    while chaos.plan or chaos.pending is not None:
        if chaos.pending is None:
            chaos.arm()
        before = ctl.kills
        chaos.one_life()
        chaos.check_invariants(enis_before, satisfied=False)
        if ctl.kills != before:  # progress for the long run (shown with -s)
            print(
                f"chaos {mode}: {sum(chaos.landed.values())}/{kills} landed "
                f"({ctl.kills} kills), {chaos.round} Workload lives, "
                f"{time.monotonic() - started:.0f}s",
                flush=True,
            )
    chaos.one_life(finish=False)
    chaos.check_invariants(enis_before, satisfied=True)

    floor = 1 if kills <= len(WINDOWS) else MIN_LANDED_FULL
    short = {w: chaos.landed[w] for w in WINDOWS if chaos.landed[w] < floor}
    tally = {
        "mode": mode,
        "kills": ctl.kills,
        "landed": {w: chaos.landed[w] for w in WINDOWS},
        "missed": dict(chaos.misses),
        "anytime_landed_in": dict(chaos.anytime_landed_in),
        "workload_lives": chaos.round,
        "seconds": round(time.monotonic() - started, 1),
        "submit_to_ready_seconds_max": round(max(chaos.recovery_seconds), 1),
        "submit_to_ready_seconds_median": round(
            sorted(chaos.recovery_seconds)[len(chaos.recovery_seconds) // 2], 1
        ),
        "invariants": f"all held after each of {chaos.round} lives",
        **_billed(env, chaos.pool, chaos.served),
    }
    # Stranded by a whole set that never served, or by two generations at once: none.
    history = described_instances(env.ec2, [{"Name": f"tag:{c.TAG_POOL}", "Values": [chaos.pool]}])
    tally["cost_problems"] = cost_problems(
        history, {chaos.pool: N}, chaos.served, datetime.now(UTC)
    )
    print(f"\nchaos tally: {json.dumps(tally)}")
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as out:
            out.write(json.dumps(tally) + "\n")
    assert not short, f"[{mode}] windows with fewer than {floor} landed kills: {short}"
    assert not tally["cost_problems"], f"[{mode}] {tally['cost_problems']}"


def _billed(env: GangEnv, pool: str, served: set[Gang]) -> dict[str, float]:
    """The mode's pool billed by the product's one definition (provisioner/cloud/billing.py),
    from EC2's history of every instance it launched, rolled-back and terminated included,
    and the gangs the run admitted Workloads onto. Stranded time here is a partial set's (a
    set that a kill caught mid-launch, or one the join watchdog or a broken gang released),
    a whole set's that never served, or two generations' at once."""
    raw = described_instances(env.ec2, [{"Name": f"tag:{c.TAG_POOL}", "Values": [pool]}])
    lives = (instance_life(i) for i in raw)
    bills = bill(lives, lambda _: N, datetime.now(UTC), served.__contains__).values()
    return {
        "billed_node_seconds": round(sum(b.billed for b in bills)),
        "stranded_node_seconds": round(sum(b.stranded for b in bills)),
    }
