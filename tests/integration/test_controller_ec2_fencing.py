"""A leader paused with SIGSTOP in the middle of a launch, its Lease taken by the standby,
then resumed with SIGCONT: it sends EC2 no mutating call after it lost the Lease.

Two controller processes, one Lease, as in `test_controller_fencing`, each signing with an
access key of its own, so the emulator's EC2 write log (`/_emulator/ec2-writes`, the
fields of CloudTrail's write events) says which replica called, and when. The pause lands
mid-pass: the leader's RunInstances has run in EC2 and its answer is held by the emulator
(a delay scoped to the leader's key) when the process is stopped; the answer is short by
one instance, so the pass's very next step on resume is a write (the rollback's
TerminateInstances, "exactly N or none"). Without the fence on EC2 that call leaves the
resumed process at once, before its elector has noticed the new holder; with it, the call
is refused before it is sent (`NotLeader`), which the replica's log shows.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.controller_harness import eventually
from tests.integration.test_controller_fencing import (
    POOL,
    KeyedReplicas,
    N,
    _leader,
    _lease,
    _signal_tree,
    key_of,
    replicas,
)

__all__ = ["replicas"]  # the fixture, shared with test_controller_fencing

# How long the emulator holds the leader's launch answer: shorter than the pause (a Lease
# taken over takes at least its 4 s duration), so the answer waits in the stopped process.
HELD_ANSWER_SECONDS = 2.0
LAUNCHES = ("RunInstances", "CreateFleet")


@pytest.mark.parametrize("paused", ["controller-pid", "whole-pod"])
def test_a_leader_paused_mid_launch_calls_ec2_no_more_after_losing_its_lease(
    replicas: KeyedReplicas, paused: str
) -> None:
    env = replicas.env
    emu = env.emulator.client
    first = _leader(replicas)
    second = next(n for n in replicas.children if n != first)
    leader_key = key_of(first)
    mark = max((w["seq"] for w in emu.ec2_writes()), default=0)
    for launch in LAUNCHES:  # whichever the pool's mode sends
        emu.delay_calls(launch, HELD_ANSWER_SECONDS, after=True, client=leader_key)
        emu.set_short_answer(launch, missing=1)
    env.submit("fenced-ec2", POOL, count=N)

    def held() -> bool:
        return any(
            c["switch"] == "delay" and c["by"] == leader_key and c["action"] in LAUNCHES
            for c in emu.consumed()
        )

    eventually(held, 240, "the leader's launch to be run and its answer held")
    child = replicas.children[first]
    if paused == "whole-pod":
        _signal_tree(child.pid, signal.SIGSTOP)
    else:
        os.kill(child.pid, signal.SIGSTOP)
    try:
        assert _leader(replicas, other_than=first) == second
        taken_at = _lease(env).spec.acquire_time.timestamp()
        time.sleep(HELD_ANSWER_SECONDS)  # the held answer is in the stopped process by now
    finally:
        _signal_tree(child.pid, signal.SIGCONT)
    emu.clear_faults()

    # The resumed replica sees it lost the Lease and leaves, its pass ended first.
    eventually(lambda: not child.alive(), 90, "the deposed replica to exit")
    mine = [w for w in emu.ec2_writes(mark) if w["requester"] == leader_key]
    assert any(w["action"] in LAUNCHES and w["received"] < taken_at for w in mine), (
        f"the leader's launch is not in EC2's log: {mine}"
    )
    late = [w for w in mine if w["received"] >= taken_at]
    assert late == [], (
        f"the deposed leader called EC2 {len(late)} time(s) after {second} took the Lease "
        f"(at {taken_at:.3f}): " + ", ".join(f"{w['action']} at {w['received']:.3f}" for w in late)
    )
    # Not vacuous: the resumed pass did reach its rollback, and the fence refused it.
    log = child.log_path.read_text(errors="replace")
    assert "TerminateInstances not sent" in log, log[-4000:]
    # The new leader finishes what the paused one started: the gang, exactly N.
    eventually(
        lambda: len(env.live_instances(POOL)) == N and (env.pool(POOL) or {}).get("status"),
        240,
        "the new leader to launch the gang",
    )
    assert any(w["requester"] == key_of(second) for w in emu.ec2_writes(mark))
