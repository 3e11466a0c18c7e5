"""The pool life cycle's plan, one transition per row: the pool as a pass sees it, and the
one step `plan` names (its action, the phase it writes, when to look again, its Events).

What a step's result leaves is `test_pool_outcomes.py`'s; the gates (backoff, a running
stack operation) have their own tables beside this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import CapacityBlock, LaunchInProgress
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import (
    NOT_FETCHED,
    Action,
    AnyView,
    Instance,
    ReleasePurpose,
)
from tests.support.pool_views import IDS, LIVE, NOW, TIMINGS, TOKENS, active, tagged, view
from tests.unit.test_pool_plan_purchase import ROWS as PURCHASE_ROWS

MARKER = LaunchInProgress(
    client_token=TOKENS[0],
    client_tokens=TOKENS,
    mode="runinstances",
    group="gen-3",
    started_at=NOW,
)
# A marker written by an older controller: `<uid>/<generation>`, no token list.
OLD_MARKER = {
    "clientToken": "pool-uid/3",
    "mode": "runinstances",
    "group": "gen-3",
    "startedAt": "2026-11-29T11:00:00Z",
}
STRAY = Instance("i-00000000000000099", "gen-7")
MARGIN = TIMINGS.block_release_margin
BLOCK_SOON = (NOW + MARGIN - timedelta(seconds=1)).isoformat()  # inside the release margin
ALL = frozenset(IDS)
BLOCK_ID = "cr-0fedcba9876543210"
RELEASING_THE_SET = {
    "startedAt": "2026-11-29T11:59:30Z",
    "reason": "JoinDeadlineExceeded",
    "instanceIds": list(IDS),
}


def block_ending_in(*, minutes: int) -> CapacityBlock:
    return CapacityBlock(reservation_id=BLOCK_ID, ends_at=NOW + timedelta(minutes=minutes))


KEPT_STACK_TTL = TIMINGS.idle_stack_ttl.total_seconds()
ANY: Any = object()  # a field the row does not pin


@dataclass(frozen=True)
class Row:
    name: str
    given: AnyView
    action: Action
    phase: Phase
    requeue_after: float | Any | None = ANY
    events: tuple[str, ...] | Any = ANY
    release_ids: frozenset[str] | Any = ANY
    purpose: ReleasePurpose | Any | None = ANY
    # Status fields (camelCase, as written to the API server) the step must carry.
    status: dict[str, Any] = field(default_factory=dict)


ROWS = [
    # --- Idle -----------------------------------------------------------------------------
    Row(
        "idle, unclaimed, no stack: nothing",
        view(claimed=False, prepared=False),
        Action.NONE,
        Phase.IDLE,
        requeue_after=None,
        status={"idleSince": None},
    ),
    Row(
        "idle with a kept stack but no stamp: its idle time starts now",
        view(claimed=False),
        Action.NONE,
        Phase.IDLE,
        requeue_after=KEPT_STACK_TTL,
        status={"idleSince": "2026-11-29T12:00:00Z"},
    ),
    Row(
        "idle stack kept until its TTL",
        view(claimed=False, status={"idleSince": (NOW - timedelta(hours=1)).isoformat()}),
        Action.NONE,
        Phase.IDLE,
        requeue_after=(TIMINGS.idle_stack_ttl - timedelta(hours=1)).total_seconds(),
    ),
    Row(
        "idle stack past its TTL is destroyed",
        view(
            claimed=False,
            status={"idleSince": (NOW - TIMINGS.idle_stack_ttl - timedelta(seconds=1)).isoformat()},
        ),
        Action.DESTROY_STACK,
        Phase.RELEASING,
        events=("StackIdle",),
        status={"idleSince": None},
    ),
    Row(
        "unclaimed, no stack, a Workload waiting for quota: prepared ahead, idle from now",
        view(
            claimed=False,
            prepared=False,
            queued_at=NOW - timedelta(seconds=5),
            status={"idleSince": (NOW - TIMINGS.idle_stack_ttl * 2).isoformat()},
        ),
        Action.PREPARE_STACK,
        Phase.IDLE,
        events=("PreparingAhead",),
        status={"idleSince": "2026-11-29T12:00:00Z"},
    ),
    Row(
        "a failed prepare's stack, nothing preparing it again, is kept until its TTL",
        view(
            claimed=False,
            prepared=False,
            partial=True,
            status={"idleSince": (NOW - timedelta(hours=1)).isoformat()},
        ),
        Action.NONE,
        Phase.IDLE,
        requeue_after=(TIMINGS.idle_stack_ttl - timedelta(hours=1)).total_seconds(),
    ),
    Row(
        "a failed prepare's stack past its TTL is destroyed",
        view(
            claimed=False,
            prepared=False,
            partial=True,
            queued_at=NOW - TIMINGS.idle_stack_ttl,
            status={"idleSince": (NOW - TIMINGS.idle_stack_ttl - timedelta(seconds=1)).isoformat()},
        ),
        Action.DESTROY_STACK,
        Phase.RELEASING,
        events=("StackIdle",),
        status={"idleSince": None},
    ),
    Row(
        "a failed prepare ahead of quota is tried again while its request is young",
        view(
            claimed=False,
            prepared=False,
            partial=True,
            queued_at=NOW - timedelta(seconds=5),
            status={"idleSince": (NOW - TIMINGS.idle_stack_ttl * 2).isoformat()},
        ),
        Action.PREPARE_STACK,
        Phase.IDLE,
        events=("PreparingAhead",),
        status={"idleSince": "2026-11-29T12:00:00Z"},
    ),
    Row(
        "a waiting Workload's request older than the idle TTL prepares nothing again",
        view(claimed=False, prepared=False, queued_at=NOW - TIMINGS.idle_stack_ttl),
        Action.NONE,
        Phase.IDLE,
        requeue_after=None,
    ),
    Row(
        "an idle TTL of 0 keeps no idle stack, so nothing is prepared ahead",
        view(claimed=False, prepared=False, queued_at=NOW, idle_stack_ttl=timedelta(0)),
        Action.NONE,
        Phase.IDLE,
        requeue_after=None,
    ),
    Row(
        "a stack prepared ahead is kept, as any idle stack, until its TTL",
        view(claimed=False, queued_at=NOW, status={"idleSince": NOW.isoformat()}),
        Action.NONE,
        Phase.IDLE,
        requeue_after=KEPT_STACK_TTL,
    ),
    Row(
        "a claim on a pool being prepared ahead starts acquisition",
        view(queued_at=NOW, prepared=False),
        Action.NONE,
        Phase.ACQUIRING,
        events=("Acquiring",),
    ),
    Row(
        "a claim starts acquisition, shortfalls reset",
        view(status={"consecutiveShortfalls": 7, "idleSince": NOW.isoformat()}),
        Action.NONE,
        Phase.ACQUIRING,
        requeue_after=0.0,
        events=("Acquiring",),
        status={"consecutiveShortfalls": 0, "idleSince": None},
    ),
    # --- Acquiring ------------------------------------------------------------------------
    Row(
        "the stack is prepared before the first launch",
        view(phase=Phase.ACQUIRING, prepared=False),
        Action.PREPARE_STACK,
        Phase.ACQUIRING,
    ),
    Row(
        "a launch is marked before it is made, with the generation's group and token",
        view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3}),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"launchInProgress": MARKER.to_dict()},
    ),
    Row(
        "a marker found after a crash is resumed, not replaced",
        view(
            phase=Phase.ACQUIRING,
            status={
                "acquireGeneration": 3,
                "launchInProgress": {**MARKER.to_dict(), "startedAt": "2026-11-29T11:00:00Z"},
            },
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"launchInProgress": {**MARKER.to_dict(), "startedAt": "2026-11-29T11:00:00Z"}},
    ),
    Row(
        "the marker holds the tokens the engine says the launch sends, first one first",
        view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3}, tokens=("tok-b", "tok-a")),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={
            "launchInProgress": {
                **MARKER.to_dict(),
                "clientToken": "tok-b",
                "clientTokens": ["tok-b", "tok-a"],
            }
        },
    ),
    Row(
        "an older controller's marker (uid/generation) is resumed, saying what is now sent",
        view(
            phase=Phase.ACQUIRING,
            status={"acquireGeneration": 3, "launchInProgress": OLD_MARKER},
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"launchInProgress": {**MARKER.to_dict(), "startedAt": "2026-11-29T11:00:00Z"}},
    ),
    Row(
        "launch facts unread: no token to mark, the launch reports the failure",
        view(phase=Phase.ACQUIRING, status={"acquireGeneration": 3}, tokens=()),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"launchInProgress": None},
    ),
    Row(
        "launch facts unread on a resumed launch: its marker stays as it was",
        view(
            phase=Phase.ACQUIRING,
            status={"acquireGeneration": 3, "launchInProgress": OLD_MARKER},
            tokens=(),
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"launchInProgress": {**OLD_MARKER, "clientTokens": None}},
    ),
    Row(
        "instances of an in-flight launch are not strays",
        view(
            phase=Phase.ACQUIRING,
            status={"acquireGeneration": 3, "launchInProgress": MARKER.to_dict()},
            live=tuple(Instance(i, "gen-3") for i in IDS),
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
    ),
    Row(
        "a claim dropped while acquiring returns to idle",
        view(phase=Phase.ACQUIRING, claimed=False, status={"consecutiveShortfalls": 2}),
        Action.NONE,
        Phase.IDLE,
        status={"consecutiveShortfalls": 0},
    ),
    # --- Joining --------------------------------------------------------------------------
    Row(
        "a launched set is recorded in the stack while its nodes join",
        view(phase=Phase.JOINING, status=active(recorded=False), live=LIVE),
        Action.RECORD_SET,
        Phase.JOINING,
        status={"joinDeadline": "2026-11-29T12:10:00Z"},
    ),
    Row(
        "joining counts Ready nodes and waits",
        view(
            phase=Phase.JOINING,
            status=active(joinDeadline="2026-11-29T12:05:00Z"),
            live=LIVE,
            ready=frozenset(IDS[:3]),
        ),
        Action.NONE,
        Phase.JOINING,
        requeue_after=5.0,
        status={"readyNodes": 3},
    ),
    Row(
        "Ready nodes of another pool or group do not count",
        view(phase=Phase.JOINING, status=active(), live=LIVE, ready=frozenset({"i-x", *IDS[:3]})),
        Action.NONE,
        Phase.JOINING,
        status={"readyNodes": 3},
    ),
    Row(
        "all N Ready is Satisfied",
        view(phase=Phase.JOINING, status=active(), live=LIVE, ready=ALL),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=None,
        events=("Satisfied",),
        status={"readyNodes": 4, "joinDeadline": None},
    ),
    Row(
        "Ready is not gated on the record, which follows at once",
        view(phase=Phase.JOINING, status=active(recorded=False), live=LIVE, ready=ALL),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=0.0,
    ),
    Row(
        "a Satisfied set not yet recorded is recorded",
        view(phase=Phase.SATISFIED, status=active(recorded=False), live=LIVE, ready=ALL),
        Action.RECORD_SET,
        Phase.SATISFIED,
    ),
    Row(
        "the join watchdog releases the whole set",
        view(
            phase=Phase.JOINING,
            status=active(joinDeadline="2026-11-29T11:59:00Z"),
            live=LIVE,
            ready=frozenset(IDS[:3]),
        ),
        Action.RELEASE_SET,
        Phase.JOINING,
        events=("JoinDeadlineExceeded",),
        release_ids=ALL,
        purpose=ReleasePurpose.ACTIVE_SET,
    ),
    Row(
        "a set whose release has begun is released, though its nodes turn Ready meanwhile",
        view(
            phase=Phase.JOINING,
            status=active(releaseInProgress=RELEASING_THE_SET),
            live=LIVE,
            ready=ALL,
        ),
        Action.RELEASE_SET,
        Phase.JOINING,
        release_ids=ALL,
        purpose=ReleasePurpose.ACTIVE_SET,
    ),
    Row(
        "a record that keeps failing cannot hold a set past its join deadline",
        view(
            phase=Phase.JOINING,
            status=active(
                recorded=False, joinDeadline="2026-11-29T11:59:00Z", consecutiveFailures=7
            ),
            live=LIVE,
            ready=frozenset(IDS[:3]),
        ),
        Action.RELEASE_SET,
        Phase.JOINING,
        release_ids=ALL,
    ),
    Row(
        "a claim gone while joining keeps the set warm at once, not once its nodes are Ready",
        view(
            phase=Phase.JOINING,
            claimed=False,
            status=active(joinDeadline="2026-11-29T12:05:00Z"),
            live=LIVE,
            ready=frozenset(IDS[:1]),
        ),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=0.0,
        events=("KeepWarm",),
        status={"keepWarmUntil": "2026-11-29T12:10:00Z", "joinDeadline": None, "readyNodes": 1},
    ),
    Row(
        "a claim gone while joining, with no keep-warm, releases the set at once",
        view(
            phase=Phase.JOINING,
            claimed=False,
            keep_warm="0s",
            status=active(joinDeadline="2026-11-29T12:05:00Z"),
            live=LIVE,
        ),
        Action.NONE,
        Phase.RELEASING,
        requeue_after=0.0,
    ),
    # --- Satisfied ------------------------------------------------------------------------
    Row(
        "a whole, recorded set waits for an event",
        view(phase=Phase.SATISFIED, status=active(), live=LIVE, ready=ALL),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=None,
        events=(),
    ),
    Row(
        "an instance missing from a listing is not taken for gone",
        view(phase=Phase.SATISFIED, status=active(), live=LIVE[1:], ready=ALL),
        Action.NONE,
        Phase.SATISFIED,
    ),
    Row(
        "a node gone NotReady goes back to Joining under a fresh deadline",
        view(phase=Phase.SATISFIED, status=active(), live=LIVE, ready=frozenset(IDS[1:])),
        Action.NONE,
        Phase.JOINING,
        events=("NodeNotReady",),
        status={"joinDeadline": "2026-11-29T12:10:00Z"},
    ),
    Row(
        "a gang that loses an instance is released whole",
        view(
            phase=Phase.SATISFIED,
            status=active(),
            live=LIVE[1:],
            gone=frozenset({IDS[0]}),
            ready=frozenset(IDS[1:]),
        ),
        Action.RELEASE_SET,
        Phase.SATISFIED,
        events=("GangBroken",),
        release_ids=ALL,
        purpose=ReleasePurpose.ACTIVE_SET,
    ),
    Row(
        "strays no set owns are terminated first, the set kept",
        view(phase=Phase.SATISFIED, status=active(), live=(*LIVE, STRAY), ready=ALL),
        Action.RELEASE_SET,
        Phase.SATISFIED,
        events=("StrayInstances",),
        release_ids=frozenset({STRAY.instance_id}),
        purpose=ReleasePurpose.STRAYS,
    ),
    Row(
        "a claim dropped on a Satisfied pool keeps it warm; the next pass tags EC2",
        view(phase=Phase.SATISFIED, claimed=False, status=active(), live=LIVE, ready=ALL),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=0.0,
        events=("KeepWarm",),
        status={"keepWarmUntil": "2026-11-29T12:10:00Z"},
    ),
    Row(
        "keep-warm whose window is on no tag yet writes it (at the pool's turn)",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE,
        ),
        Action.TAG_KEEP_WARM,
        Phase.KEEP_WARM,
        requeue_after=300.0,
        events=(),
    ),
    Row(
        "keep-warm whose tag holds an earlier window writes the new one",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=tagged(LIVE, "2026-11-29T11:50:00+00:00"),
        ),
        Action.TAG_KEEP_WARM,
        Phase.KEEP_WARM,
    ),
    Row(
        "keep-warm with a member missing from the listing writes the tag",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=tagged(LIVE[:3], "2026-11-29T12:05:00+00:00"),
        ),
        Action.TAG_KEEP_WARM,
        Phase.KEEP_WARM,
    ),
    Row(
        "keep-warm whose tag this reconciler wrote waits, though the listing predates it",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE,
            keep_warm_tagged=NOW + timedelta(minutes=5, microseconds=300),
        ),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=300.0,
    ),
    Row(
        "keep-warm whose tag this reconciler wrote for an earlier window writes the new one",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE,
            keep_warm_tagged=NOW - timedelta(minutes=5),
        ),
        Action.TAG_KEEP_WARM,
        Phase.KEEP_WARM,
    ),
    Row(
        "zero keep-warm releases at once",
        view(
            phase=Phase.SATISFIED,
            claimed=False,
            status=active(),
            live=LIVE,
            ready=ALL,
            keep_warm="0s",
        ),
        Action.NONE,
        Phase.RELEASING,
        requeue_after=0.0,
    ),
    # --- KeepWarm -------------------------------------------------------------------------
    Row(
        "a new claim reuses the whole warm set: Satisfied in one step, no launch, no tag write",
        view(
            phase=Phase.KEEP_WARM,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE,
            ready=ALL,
        ),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=None,
        events=(),
        status={"keepWarmUntil": None, "readyNodes": 4, "joinDeadline": None},
    ),
    Row(
        "a warm set that lost a node is reused through Joining",
        view(
            phase=Phase.KEEP_WARM,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE,
            ready=frozenset(IDS[1:]),
        ),
        Action.NONE,
        Phase.JOINING,
        requeue_after=0.0,
        status={"joinDeadline": "2026-11-29T12:10:00Z", "readyNodes": 3},
    ),
    Row(
        "a new claim on a set whose tag copy failed drops that failure: a claimed set never "
        "goes for its tag",
        view(
            phase=Phase.KEEP_WARM,
            status=active(
                keepWarmUntil="2026-11-29T12:05:00Z",
                consecutiveFailures=2,
                lastError={
                    "reason": "RequestLimitExceeded",
                    "message": "CreateTags throttled",
                    "operation": "tag-keep-warm",
                },
            ),
            live=LIVE,
            ready=ALL,
        ),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=None,
        status={"lastError": None, "consecutiveFailures": 0},
    ),
    Row(
        "keep-warm waits until its expiry",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=tagged(LIVE, "2026-11-29T12:05:00+00:00"),
        ),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=300.0,
    ),
    Row(
        "keep-warm whose tag copy failed tries the tag again, the window unchanged",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(
                keepWarmUntil="2026-11-29T12:05:00Z",
                consecutiveFailures=1,
                lastError={"reason": "AwsUnavailable", "message": "CreateTags throttled"},
            ),
            live=LIVE,
        ),
        Action.TAG_KEEP_WARM,
        Phase.KEEP_WARM,
        requeue_after=300.0,
        status={"keepWarmUntil": "2026-11-29T12:05:00Z"},
    ),
    Row(
        "keep-warm over: releasing",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T11:59:00Z"),
            live=LIVE,
        ),
        Action.NONE,
        Phase.RELEASING,
        requeue_after=0.0,
        events=("KeepWarmExpired",),
    ),
    Row(
        "a warm set that lost an instance is released",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
            live=LIVE[1:],
            gone=frozenset({IDS[0]}),
        ),
        Action.NONE,
        Phase.RELEASING,
        requeue_after=0.0,
    ),
    # --- Releasing ------------------------------------------------------------------------
    Row(
        "a release removes the set and keeps the prepared stack",
        view(phase=Phase.RELEASING, claimed=False, status=active(), live=LIVE),
        Action.RELEASE_SET,
        Phase.RELEASING,
        release_ids=ALL,
        purpose=ReleasePurpose.ACTIVE_SET,
    ),
    Row(
        "a released pool with its stack kept is Idle, its idle time started",
        view(phase=Phase.RELEASING, claimed=False),
        Action.NONE,
        Phase.IDLE,
        requeue_after=KEPT_STACK_TTL,
        events=("Released",),
        status={"idleSince": "2026-11-29T12:00:00Z"},
    ),
    Row(
        "a zero idle-stack TTL destroys the stack with the set",
        view(
            phase=Phase.RELEASING,
            claimed=False,
            status=active(),
            live=LIVE,
            idle_stack_ttl=timedelta(0),
        ),
        Action.DESTROY_STACK,
        Phase.RELEASING,
    ),
    Row(
        "with a zero idle-stack TTL, the destroyed pool is Idle with no idle time",
        view(phase=Phase.RELEASING, claimed=False, prepared=False, idle_stack_ttl=timedelta(0)),
        Action.NONE,
        Phase.IDLE,
        requeue_after=None,
        status={"idleSince": None},
    ),
    # --- Deletion -------------------------------------------------------------------------
    Row(
        "a Satisfied pool being deleted destroys its stack first",
        view(phase=Phase.SATISFIED, status=active(), live=LIVE, deleting=True),
        Action.DESTROY_STACK,
        Phase.RELEASING,
    ),
    Row(
        "a warm pool being deleted destroys its stack first",
        view(phase=Phase.KEEP_WARM, status=active(), live=LIVE, deleting=True),
        Action.DESTROY_STACK,
        Phase.RELEASING,
    ),
    Row(
        "a released pool being deleted loses its finalizer",
        view(deleting=True, prepared=False),
        Action.REMOVE_FINALIZER,
        Phase.IDLE,
    ),
    Row(
        "a pool being deleted whose first prepare failed partway destroys what it left",
        view(deleting=True, prepared=False, partial=True),
        Action.DESTROY_STACK,
        Phase.RELEASING,
    ),
    # --- Capacity Blocks ------------------------------------------------------------------
    Row(
        "a Satisfied gang on a block wakes up at its release time",
        view(
            phase=Phase.SATISFIED,
            status=active(capacityBlockEndsAt=(NOW + timedelta(hours=2)).isoformat()),
            live=LIVE,
            ready=ALL,
        ),
        Action.NONE,
        Phase.SATISFIED,
        requeue_after=(timedelta(hours=2) - MARGIN).total_seconds(),
    ),
    Row(
        "a Joining gang on a block is released before the block ends",
        view(phase=Phase.JOINING, status=active(capacityBlockEndsAt=BLOCK_SOON), live=LIVE),
        Action.RELEASE_SET,
        Phase.JOINING,
        events=("CapacityBlockEnding",),
        release_ids=ALL,
    ),
    Row(
        "a Satisfied gang on a block is released before the block ends",
        view(
            phase=Phase.SATISFIED,
            status=active(capacityBlockEndsAt=BLOCK_SOON),
            live=LIVE,
            ready=ALL,
        ),
        Action.RELEASE_SET,
        Phase.SATISFIED,
        events=("CapacityBlockEnding",),
        release_ids=ALL,
    ),
    Row(
        "a warm set on an ending block is released",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(
                capacityBlockEndsAt=(NOW + MARGIN).isoformat(),
                keepWarmUntil=(NOW + timedelta(minutes=5)).isoformat(),
            ),
            live=LIVE,
        ),
        Action.NONE,
        Phase.RELEASING,
        events=("CapacityBlockEnding",),
    ),
    Row(
        "a warm set wakes up for whichever comes first",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(
                capacityBlockEndsAt=(NOW + MARGIN + timedelta(minutes=2)).isoformat(),
                keepWarmUntil=(NOW + timedelta(minutes=5)).isoformat(),
            ),
            live=tagged(LIVE, (NOW + timedelta(minutes=5)).isoformat()),
        ),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=120.0,
    ),
    Row(
        "a block too close to its end for a gang to join: no launch, its end recorded and said",
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            capacity_block=block_ending_in(minutes=44),
        ),
        Action.NONE,
        Phase.ACQUIRING,
        requeue_after=TIMINGS.config_delay,
        events=("CapacityBlockEnded",),
        status={
            "capacityBlock": {"reservationId": BLOCK_ID, "endsAt": "2026-11-29T12:44:00Z"},
            "launchInProgress": None,
        },
    ),
    Row(
        "a block that ended, from the status's record when EC2 was not read this pass",
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            status={"capacityBlock": {"reservationId": BLOCK_ID, "endsAt": "2026-11-29T11:00:00Z"}},
        ),
        Action.NONE,
        Phase.ACQUIRING,
        events=("CapacityBlockEnded",),
        status={"launchInProgress": None},
    ),
    Row(
        "a block with time for a gang to join: the launch is marked, the block recorded",
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            capacity_block=block_ending_in(minutes=46),
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
        status={"capacityBlock": {"reservationId": BLOCK_ID, "endsAt": "2026-11-29T12:46:00Z"}},
    ),
    Row(
        "a launch marked before the block ran short is resumed (its set may exist)",
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            capacity_block=block_ending_in(minutes=10),
            status={"acquireGeneration": 3, "launchInProgress": MARKER.to_dict()},
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
    ),
    Row(
        "a record of another block does not hold this one",
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            status={
                "capacityBlock": {
                    "reservationId": "cr-0123456789abcdef0",
                    "endsAt": "2026-11-29T11:00:00Z",
                }
            },
        ),
        Action.LAUNCH,
        Phase.ACQUIRING,
    ),
    Row(
        "entering keep-warm on a block wakes up for its release",
        view(
            phase=Phase.SATISFIED,
            claimed=False,
            status=active(capacityBlockEndsAt=(NOW + MARGIN + timedelta(minutes=3)).isoformat()),
            live=LIVE,
            ready=ALL,
        ),
        Action.NONE,
        Phase.KEEP_WARM,
        requeue_after=0.0,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_plan(row: Row) -> None:
    step = plan(row.given)
    assert (step.action, step.status.phase) == (row.action, row.phase), step.why
    if row.requeue_after is not ANY:
        assert step.requeue_after == row.requeue_after
    if row.events is not ANY:
        assert tuple(e.reason for e in step.events) == row.events
    if row.release_ids is not ANY:
        assert frozenset(step.release_ids) == row.release_ids
    if row.purpose is not ANY:
        assert step.release_purpose is row.purpose
    written = step.status.model_dump(mode="json", by_alias=True)
    for key, value in row.status.items():
        assert written[key] == value, key


def test_every_phase_and_action_has_a_row() -> None:
    # A new phase or action without a row in this table fails here.
    assert {r.phase for r in ROWS} == set(Phase)
    purchases = {r.action for r in PURCHASE_ROWS}  # the purchase's rows have a file of their own
    assert {r.action for r in ROWS} | purchases == set(Action)


_SETTLED = (Phase.JOINING, Phase.SATISFIED, Phase.KEEP_WARM)


@pytest.mark.parametrize(
    "given",
    [r.given for r in ROWS if r.given.status.phase in _SETTLED and not r.given.deleting],
)
def test_a_joining_settled_or_warm_pool_never_asks_about_its_stack(given: AnyView) -> None:
    # Asking may run the Pulumi CLI on the reconcile worker (a backend that failed the last
    # read is asked again): the pass gathers no answer for these, and the plan reads none
    # (its planner takes a view with no stack to read: `test_pool_phases.py`).
    assert given.stack is NOT_FETCHED
    plan(given)


def test_a_planned_release_before_a_blocks_end_says_it_was_planned() -> None:
    ending = view(
        phase=Phase.SATISFIED,
        status=active(capacityBlockEndsAt=BLOCK_SOON),
        live=LIVE,
        ready=ALL,
        capacity_reservation_id=BLOCK_ID,
    )
    step = plan(ending)
    (event,) = step.events
    assert (event.type, event.reason) == ("Normal", "CapacityBlockEnding")
    assert "as planned" in event.message and "lost" not in event.message
    assert step.status.last_error is not None and "as planned" in step.status.last_error.message


def test_a_block_too_late_is_said_once() -> None:
    first = plan(
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            capacity_block=block_ending_in(minutes=44),
        )
    )
    again = plan(
        view(
            phase=Phase.ACQUIRING,
            capacity_reservation_id=BLOCK_ID,
            capacity_block=block_ending_in(minutes=44),
            status=first.status.model_dump(mode="json", by_alias=True, exclude_none=True),
        )
    )
    assert (again.action, again.events) == (Action.NONE, ())
    assert first.status.last_error is not None
    message = first.status.last_error.message
    assert BLOCK_ID in message and "2026-11-29T12:44:00Z" in message
