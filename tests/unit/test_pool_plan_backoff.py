"""A failed step waits out its backoff before it runs again; nothing else waits for it.

The failure's own status write wakes the pool at once, so without the gate in `plan` every
failure was retried immediately, whatever wait its result asked for. One row per case.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, Backoff, PoolView
from tests.support.pool_views import IDS, LIVE, NOW, active, view

LATER = NOW + timedelta(seconds=8)

JOINING_UNRECORDED = view(
    phase=Phase.JOINING,
    status=active(
        recorded=False,
        joinDeadline=(NOW + timedelta(minutes=5)).isoformat(),
        consecutiveFailures=3,
    ),
    live=LIVE,
)
PAST_THE_DEADLINE = view(
    phase=Phase.JOINING,
    status=active(recorded=False, joinDeadline=(NOW - timedelta(seconds=1)).isoformat()),
    live=LIVE,
)
ALL_READY = view(
    phase=Phase.JOINING,
    status=active(recorded=False, joinDeadline=(NOW + timedelta(minutes=5)).isoformat()),
    live=LIVE,
    ready=frozenset(IDS),
)
SHORT_LAST_TIME = view(phase=Phase.ACQUIRING, status={"acquireGeneration": 4})


def backing_off(v: PoolView, action: Action, until: object = LATER) -> PoolView:
    return replace(v, backoff=Backoff(action, until))  # type: ignore[arg-type]


# (case, view, the step it plans free, the step it plans while `action` backs off)
ROWS: list[tuple[str, PoolView, Action, Action, Action]] = [
    (
        "a failed record waits",
        JOINING_UNRECORDED,
        Action.RECORD_SET,
        Action.RECORD_SET,
        Action.NONE,
    ),
    (
        "the join deadline's release does not wait for the record's backoff",
        PAST_THE_DEADLINE,
        Action.RECORD_SET,
        Action.RELEASE_SET,
        Action.RELEASE_SET,
    ),
    (
        "a failed release waits",
        PAST_THE_DEADLINE,
        Action.RELEASE_SET,
        Action.RELEASE_SET,
        Action.NONE,
    ),
    (
        "a launch after a shortfall waits",
        SHORT_LAST_TIME,
        Action.LAUNCH,
        Action.LAUNCH,
        Action.NONE,
    ),
    (
        "a prepare's backoff does not hold a launch",
        SHORT_LAST_TIME,
        Action.PREPARE_STACK,
        Action.LAUNCH,
        Action.LAUNCH,
    ),
]


@pytest.mark.parametrize(
    ("v", "failed", "free", "gated"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_only_the_failed_step_waits(
    v: PoolView, failed: Action, free: Action, gated: Action
) -> None:
    assert plan(v).action is free
    step = plan(backing_off(v, failed))
    assert step.action is gated
    if gated is Action.NONE:
        assert step.status == v.status, "a step that waits changes nothing"
        assert step.requeue_after == pytest.approx(8.0)
        assert step.events == () and "backing off" in step.why


def test_the_step_runs_once_its_backoff_is_over() -> None:
    assert plan(backing_off(JOINING_UNRECORDED, Action.RECORD_SET, NOW)).action is Action.RECORD_SET


def test_a_set_becomes_satisfied_while_its_record_backs_off() -> None:
    step = plan(backing_off(ALL_READY, Action.RECORD_SET))
    assert step.action is Action.NONE and step.status.phase == Phase.SATISFIED
    assert [e.reason for e in step.events] == [c.EventReason.SATISFIED]
