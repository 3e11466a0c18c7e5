"""What a step's result leaves, one row per result: the pool as the pass saw it, the result
its planned step reported, and the status, wait and Events that `outcome` gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import StackResult
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult, PoolView
from tests.support.pool_views import IDS, LIVE, NOW, TIMINGS, active, view

ALL = frozenset(IDS)
ANY: Any = object()
STARTS = NOW + timedelta(minutes=20)
BLOCK_END = NOW + timedelta(hours=2)
BLOCK_ID = "cr-0fedcba9876543210"
BLOCK_RECORD = {
    "reservationId": BLOCK_ID,
    "endsAt": (NOW + TIMINGS.block_release_margin).strftime("%Y-%m-%dT%H:%M:%SZ"),
}
ACQUIRING_GEN_3 = view(
    phase=Phase.ACQUIRING, status={"acquireGeneration": 3, "consecutiveShortfalls": 1}
)
RECORDING = view(phase=Phase.JOINING, status=active(recorded=False), live=LIVE)


@dataclass(frozen=True)
class Row:
    name: str
    given: PoolView
    action: Action  # what plan names for `given` (checked, so the row cannot drift)
    result: ActionResult
    phase: Phase
    wait: float | Any | None = ANY
    events: tuple[str, ...] | Any = ANY
    status: dict[str, Any] = field(default_factory=dict)


def failed(kind: FailureKind, reason: str = "Boom", **extra: Any) -> ActionResult:
    return ActionResult(False, failure=kind, reason=reason, message="it failed", **extra)


ROWS = [
    Row(
        "a launched set is persisted and the generation moves",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        ActionResult(True, instance_ids=IDS),
        Phase.JOINING,
        wait=0.0,
        events=("Launched",),
        status={
            "instanceIds": list(IDS),
            "activeGroup": "gen-3",
            "acquireGeneration": 4,
            "launchInProgress": None,
            "consecutiveShortfalls": 0,
            "joinDeadline": "2026-11-29T12:10:00Z",
        },
    ),
    Row(
        "a launch on a Capacity Block records the block's end",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        ActionResult(True, instance_ids=IDS, block_ends_at=BLOCK_END),
        Phase.JOINING,
        status={"capacityBlockEndsAt": "2026-11-29T14:00:00Z"},
    ),
    Row(
        "a shortfall leaves nothing, counts, moves the generation, and asks for a turn at once",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.CAPACITY, "InsufficientInstanceCapacity"),
        Phase.ACQUIRING,
        wait=0.0,
        events=("CapacityShortfall",),
        status={
            "instanceIds": [],
            "consecutiveShortfalls": 2,
            "acquireGeneration": 4,
            "launchInProgress": None,
            "lastShortfallTime": "2026-11-29T12:00:00Z",
        },
    ),
    Row(
        "a partial answer (terminated whole) counts as a shortfall",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.MALFORMED, "PartialGroupFound"),
        Phase.ACQUIRING,
        wait=0.0,
        status={"consecutiveShortfalls": 2, "acquireGeneration": 4},
    ),
    Row(
        "a shortfall sooner than retryBackoff after the last counted one is retried, uncounted",
        view(
            phase=Phase.ACQUIRING,
            status={
                "acquireGeneration": 3,
                "consecutiveShortfalls": 2,
                # backoff(2) is 10 s: 9 s after the last counted, this one does not count.
                "lastShortfallTime": (NOW - timedelta(seconds=9)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        ),
        Action.LAUNCH,
        failed(FailureKind.CAPACITY, "InsufficientInstanceCapacity"),
        Phase.ACQUIRING,
        wait=0.0,
        events=(),
        status={"consecutiveShortfalls": 2, "acquireGeneration": 4, "launchInProgress": None},
    ),
    Row(
        "a shortfall retryBackoff after the last counted one counts",
        view(
            phase=Phase.ACQUIRING,
            status={
                "acquireGeneration": 3,
                "consecutiveShortfalls": 2,
                "lastShortfallTime": (NOW - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        ),
        Action.LAUNCH,
        failed(FailureKind.CAPACITY, "InsufficientInstanceCapacity"),
        Phase.ACQUIRING,
        wait=0.0,
        events=("CapacityShortfall",),
        status={"consecutiveShortfalls": 3, "acquireGeneration": 4},
    ),
    Row(
        "a throttled launch keeps its marker, so the token is replayed",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.RETRYABLE, "RequestLimitExceeded", throttled=True),
        Phase.ACQUIRING,
        wait=0.0,  # the launch budget shrank and gives the pool its next turn
        events=("RequestLimitExceeded",),
        status={"acquireGeneration": 3, "consecutiveFailures": 1},
    ),
    Row(
        "an AWS-side failure of a launch keeps its marker and backs off",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.RETRYABLE, "InternalError"),
        Phase.ACQUIRING,
        wait=10.0,
        events=("InternalError",),
        status={"acquireGeneration": 3, "consecutiveFailures": 1},
    ),
    Row(
        "a configuration error clears the marker and keeps the generation",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.CONFIG, "InvalidAMIID"),
        Phase.ACQUIRING,
        wait=TIMINGS.config_delay,
        status={
            "launchInProgress": None,
            "acquireGeneration": 3,
            "lastError": {
                "reason": "InvalidAMIID",
                "message": "it failed",
                "operation": "launch",
                "kind": "config",
            },
        },
    ),
    Row(
        "a block not yet active holds at $0 until its start: no shortfall, same generation",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.NOT_ACTIVE, "ReservationNotActive", starts_at=STARTS),
        Phase.ACQUIRING,
        wait=20 * 60.0,
        events=("ReservationNotActive",),
        status={"consecutiveShortfalls": 1, "acquireGeneration": 3, "launchInProgress": None},
    ),
    Row(
        "a hold without a known start looks again after the config delay",
        ACQUIRING_GEN_3,
        Action.LAUNCH,
        failed(FailureKind.NOT_ACTIVE, "ReservationNotActive"),
        Phase.ACQUIRING,
        wait=TIMINGS.config_delay,
    ),
    Row(
        "a recorded set is the stack's",
        RECORDING,
        Action.RECORD_SET,
        ActionResult(True),
        Phase.JOINING,
        wait=0.0,
        status={"lastStackOperation": "record", "recordedGroup": "gen-0"},
    ),
    Row(
        "the join watchdog's release acquires a new set",
        view(
            phase=Phase.JOINING,
            status=active(joinDeadline="2026-11-29T11:59:00Z"),
            live=LIVE,
            ready=frozenset(IDS[:3]),
        ),
        Action.RELEASE_SET,
        ActionResult(True),
        Phase.ACQUIRING,
        status={"instanceIds": [], "activeGroup": None, "recordedGroup": None},
    ),
    Row(
        "a launch on a Capacity Block keeps the block's record, to outlive the set",
        view(
            phase=Phase.ACQUIRING,
            status={"acquireGeneration": 3},
            capacity_reservation_id=BLOCK_ID,
        ),
        Action.LAUNCH,
        ActionResult(True, instance_ids=IDS, block_ends_at=BLOCK_END),
        Phase.JOINING,
        status={"capacityBlock": {"reservationId": BLOCK_ID, "endsAt": "2026-11-29T14:00:00Z"}},
    ),
    Row(
        "a block's release keeps the block's record: a returning Workload is refused from it",
        view(
            phase=Phase.SATISFIED,
            status=active(
                capacityBlockEndsAt=(NOW + TIMINGS.block_release_margin).isoformat(),
                capacityBlock=BLOCK_RECORD,
            ),
            live=LIVE,
            ready=ALL,
            capacity_reservation_id=BLOCK_ID,
        ),
        Action.RELEASE_SET,
        ActionResult(True),
        Phase.ACQUIRING,
        status={"instanceIds": [], "capacityBlockEndsAt": None, "capacityBlock": BLOCK_RECORD},
    ),
    Row(
        "a block's release before its end acquires again, the block's end forgotten",
        view(
            phase=Phase.SATISFIED,
            status=active(capacityBlockEndsAt=(NOW + TIMINGS.block_release_margin).isoformat()),
            live=LIVE,
            ready=ALL,
        ),
        Action.RELEASE_SET,
        ActionResult(True),
        Phase.ACQUIRING,
        status={"instanceIds": [], "capacityBlockEndsAt": None},
    ),
    Row(
        "a pool's release stays Releasing for the pass that says it is released",
        view(phase=Phase.RELEASING, claimed=False, status=active(), live=LIVE),
        Action.RELEASE_SET,
        ActionResult(True),
        Phase.RELEASING,
        status={"instanceIds": [], "lastStackOperation": "remove-set"},
    ),
    Row(
        "a strays release keeps the active set",
        view(
            phase=Phase.SATISFIED,
            status=active(),
            live=(*LIVE, LIVE[0].__class__("i-00000000000000099", "gen-7")),
            ready=ALL,
        ),
        Action.RELEASE_SET,
        ActionResult(True),
        Phase.SATISFIED,
        status={"instanceIds": list(IDS), "releaseInProgress": None, "recordedGroup": "gen-0"},
    ),
    Row(
        "a destroyed stack leaves the pool Releasing with no set",
        view(
            phase=Phase.RELEASING,
            claimed=False,
            status=active(),
            live=LIVE,
            idle_stack_ttl=timedelta(0),
        ),
        Action.DESTROY_STACK,
        ActionResult(True),
        Phase.RELEASING,
        status={"instanceIds": [], "lastStackOperation": "destroy", "recordedGroup": None},
    ),
    Row(
        "a prepared stack is noted",
        view(phase=Phase.ACQUIRING, prepared=False),
        Action.PREPARE_STACK,
        ActionResult(True),
        Phase.ACQUIRING,
        wait=0.0,
        status={"lastStackOperation": "prepare", "lastStackResult": "succeeded"},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_outcome(row: Row) -> None:
    step = plan(row.given)
    assert step.action is row.action, step.why
    status, wait, events = outcome(row.given, step, row.result)
    assert status.phase == row.phase
    if row.wait is not ANY:
        assert wait == row.wait
    if row.events is not ANY:
        assert tuple(e.reason for e in events) == row.events
    written = status.model_dump(mode="json", by_alias=True)
    for key, value in row.status.items():
        assert written[key] == value, key


@pytest.mark.parametrize(
    ("failures", "kind", "delay"),
    [
        (0, FailureKind.RETRYABLE, 5.0),
        (1, FailureKind.RETRYABLE, 10.0),
        (3, FailureKind.RETRYABLE, 40.0),
        (9, FailureKind.RETRYABLE, 300.0),
        (0, FailureKind.NOT_PREPARED, 5.0),
        (4, FailureKind.CONFIG, 60.0),
    ],
)
def test_a_failing_stack_step_backs_off_and_escalates_by_its_kind(
    failures: int, kind: FailureKind, delay: float
) -> None:
    given = view(
        phase=Phase.JOINING, status=active(recorded=False, consecutiveFailures=failures), live=LIVE
    )
    step = plan(given)
    assert step.action is Action.RECORD_SET
    status, wait, events = outcome(given, step, failed(kind, "PoolNotPrepared"))
    assert [e.reason for e in events] == ["PoolNotPrepared"]
    assert wait == delay and status.consecutive_failures == failures + 1
    assert status.last_error is not None and status.last_error.reason == "PoolNotPrepared"
    assert status.last_stack_result == StackResult.failed("PoolNotPrepared")
    recovered, _, _ = outcome(given, step, ActionResult(True))
    assert recovered.consecutive_failures == 0


# --- Scenarios: a few steps in a row -------------------------------------------------------


def test_a_released_set_then_an_idle_pool_with_its_stack_kept() -> None:
    given = view(phase=Phase.RELEASING, claimed=False, status=active(), live=LIVE)
    status, _, _ = outcome(given, plan(given), ActionResult(True))
    done = plan(view(phase=Phase.RELEASING, claimed=False, status=status.to_dict()))
    assert (done.action, done.status.phase, done.status.idle_since) == (
        Action.NONE,
        Phase.IDLE,
        NOW,
    )


def test_a_claim_on_a_pool_with_a_kept_stack_launches_without_a_prepare() -> None:
    claimed = plan(view(status={"idleSince": NOW.isoformat(), "acquireGeneration": 2}))
    assert claimed.status.phase == Phase.ACQUIRING and claimed.status.idle_since is None
    assert plan(view(phase=Phase.ACQUIRING, status=claimed.status.to_dict())).action is (
        Action.LAUNCH
    )


def test_a_reused_warm_set_stays_settled_on_the_next_pass() -> None:
    warm = view(
        phase=Phase.KEEP_WARM,
        status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
        live=LIVE,
        ready=ALL,
    )
    reused = plan(warm)
    follow = plan(view(phase=Phase.SATISFIED, status=reused.status.to_dict(), live=LIVE, ready=ALL))
    assert follow.action is Action.NONE and follow.status == reused.status
