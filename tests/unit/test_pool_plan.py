"""The pool life cycle, one transition per row: state in, step and status out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import LaunchInProgress
from provisioner.controllers.pool_outcomes import outcome
from provisioner.controllers.pool_plan import plan
from provisioner.controllers.pool_steps import Action, ActionResult, Instance, PoolView
from tests.support.pool_views import IDS, LIVE, NOW, active, view


def test_idle_without_claim_does_nothing() -> None:
    step = plan(view(claimed=False))
    assert step.action is Action.NONE and step.status.phase == c.PHASE_IDLE


def test_a_claim_starts_acquisition_with_shortfalls_reset() -> None:
    step = plan(view(status={"consecutiveShortfalls": 7}))
    assert step.status.phase == c.PHASE_ACQUIRING
    assert step.status.consecutive_shortfalls == 0
    assert step.events[0].reason == "Acquiring"


def test_the_stack_is_prepared_before_the_first_launch() -> None:
    assert plan(view(phase=c.PHASE_ACQUIRING, prepared=False)).action is Action.PREPARE_STACK


def test_a_launch_is_marked_before_it_is_made() -> None:
    step = plan(view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3}))
    assert step.action is Action.LAUNCH
    marker = step.status.launch_in_progress
    assert marker is not None and marker.group == "gen-3"


def test_a_marker_found_after_a_crash_is_resumed_not_replaced() -> None:
    marker = LaunchInProgress(
        client_token="pool-uid/3", mode="runinstances", group="gen-3", started_at=NOW
    )
    v = view(
        phase=c.PHASE_ACQUIRING,
        status={"acquireGeneration": 3, "launchInProgress": marker.to_dict()},
    )
    step = plan(v)
    assert step.action is Action.LAUNCH
    assert step.status.launch_in_progress == marker


def test_launched_set_is_persisted_and_the_generation_moves() -> None:
    v = view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3})
    step = plan(v)
    status, _, events = outcome(v, step, ActionResult(ok=True, instance_ids=IDS))
    assert status.phase == c.PHASE_JOINING
    assert status.instance_ids == IDS and status.active_group == "gen-3"
    assert status.acquire_generation == 4 and status.launch_in_progress is None
    assert status.join_deadline == NOW + timedelta(minutes=10)
    assert events[0].reason == "Launched"


def test_a_shortfall_leaves_nothing_and_counts_and_moves_the_generation() -> None:
    v = view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3, "consecutiveShortfalls": 1})
    step = plan(v)
    status, delay, events = outcome(
        v,
        step,
        ActionResult(
            ok=False,
            failure=FailureKind.CAPACITY,
            reason="InsufficientInstanceCapacity",
            message="none left",
        ),
    )
    assert status.phase == c.PHASE_ACQUIRING and status.instance_ids == ()
    assert status.consecutive_shortfalls == 2 and status.acquire_generation == 4
    assert status.launch_in_progress is None and status.last_shortfall_time == NOW
    assert delay == 10.0
    assert events[0].reason == "CapacityShortfall"


def test_a_throttled_launch_keeps_its_marker_so_the_token_is_replayed() -> None:
    v = view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3})
    step = plan(v)
    status, _, _ = outcome(
        v,
        step,
        ActionResult(ok=False, failure=FailureKind.RETRYABLE, reason="RequestLimitExceeded"),
    )
    assert status.launch_in_progress == step.status.launch_in_progress
    assert status.acquire_generation == 3


def test_a_configuration_error_clears_the_marker_and_keeps_the_generation() -> None:
    v = view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3})
    step = plan(v)
    status, _, _ = outcome(
        v,
        step,
        ActionResult(ok=False, failure=FailureKind.CONFIG, reason="InvalidAMIID", message="fix it"),
    )
    assert status.launch_in_progress is None and status.acquire_generation == 3
    assert status.last_error is not None and status.last_error.reason == "InvalidAMIID"


def test_a_claim_dropped_while_acquiring_returns_to_idle() -> None:
    step = plan(view(phase=c.PHASE_ACQUIRING, claimed=False))
    assert step.status.phase == c.PHASE_IDLE


def test_a_launched_set_is_recorded_in_the_stack_while_its_nodes_join() -> None:
    v = view(phase=c.PHASE_JOINING, status=active(recorded=False), live=LIVE)
    step = plan(v)
    assert step.action is Action.RECORD_SET and step.status.join_deadline is not None


def test_ready_is_not_gated_on_the_record() -> None:
    unrecorded = active(recorded=False)
    v = view(phase=c.PHASE_JOINING, status=unrecorded, live=LIVE, ready=frozenset(IDS))
    step = plan(v)
    assert step.action is Action.NONE and step.status.phase == c.PHASE_SATISFIED
    assert step.requeue_after == 0.0, "the record follows at once"
    after = view(phase=c.PHASE_SATISFIED, status=unrecorded, live=LIVE, ready=frozenset(IDS))
    assert plan(after).action is Action.RECORD_SET


def test_a_record_that_keeps_failing_cannot_hold_a_set_past_its_join_deadline() -> None:
    failing = {
        **active(joinDeadline="2026-11-29T11:59:00Z", recorded=False),
        "consecutiveFailures": 7,
    }
    v = view(phase=c.PHASE_JOINING, status=failing, live=LIVE, ready=frozenset(IDS[:3]))
    step = plan(v)
    assert step.action is Action.RELEASE_SET and set(step.release_ids) == set(IDS)


@pytest.mark.parametrize(
    ("failures", "kind", "delay"),
    [
        (0, "retryable", 5.0),
        (1, "retryable", 10.0),
        (3, "retryable", 40.0),
        (9, "retryable", 300.0),
        (0, "not-prepared", 5.0),
        (4, "config", 60.0),
    ],
)
def test_a_failing_stack_step_backs_off_and_escalates_by_its_kind(
    failures: int, kind: str, delay: float
) -> None:
    v = view(
        phase=c.PHASE_JOINING,
        status=active(recorded=False, consecutiveFailures=failures),
        live=LIVE,
    )
    step = plan(v)
    assert step.action is Action.RECORD_SET
    failed = ActionResult(
        False, failure=FailureKind(kind), reason="PoolNotPrepared", message="no stack"
    )
    status, wait, events = outcome(v, step, failed)
    assert [e.reason for e in events] == ["PoolNotPrepared"]
    assert wait == delay and status.consecutive_failures == failures + 1
    assert status.last_error is not None and status.last_error.reason == "PoolNotPrepared"
    recovered, _, _ = outcome(v, step, ActionResult(True))
    assert recovered.consecutive_failures == 0


def test_joining_counts_ready_nodes_and_waits() -> None:
    v = view(
        phase=c.PHASE_JOINING,
        status=active(joinDeadline="2026-11-29T12:05:00Z"),
        live=LIVE,
        ready=frozenset(IDS[:3]),
    )
    step = plan(v)
    assert step.action is Action.NONE and step.status.ready_nodes == 3
    assert step.status.phase == c.PHASE_JOINING


def test_all_n_ready_is_satisfied() -> None:
    v = view(phase=c.PHASE_JOINING, status=active(), live=LIVE, ready=frozenset(IDS))
    step = plan(v)
    assert step.status.phase == c.PHASE_SATISFIED and step.status.ready_nodes == 4


@pytest.mark.parametrize(
    "v",
    [
        view(phase=c.PHASE_JOINING, status=active(), live=LIVE, ready=frozenset(IDS[:3])),
        view(phase=c.PHASE_JOINING, status=active(), live=LIVE, ready=frozenset(IDS)),
        view(phase=c.PHASE_SATISFIED, status=active(), live=LIVE, ready=frozenset(IDS)),
        view(phase=c.PHASE_KEEP_WARM, status=active(), live=LIVE, ready=frozenset(IDS)),
    ],
    ids=["joining", "joined", "satisfied", "warm-set-claimed"],
)
def test_a_joining_or_settled_pool_never_asks_about_its_stack(v: PoolView) -> None:
    # Asking may run the Pulumi CLI on the reconcile worker (a backend that failed the last
    # read is asked again): a pool whose set is whole or joining has no use for the answer.
    assert v.stack_prepared is None, "the pass gathers no stack answer for it"
    step = plan(v)
    assert step.action in (Action.NONE, Action.TAG_KEEP_WARM), step


def test_ready_nodes_of_another_pool_or_group_do_not_count() -> None:
    v = view(
        phase=c.PHASE_JOINING, status=active(), live=LIVE, ready=frozenset({"i-other", *IDS[:3]})
    )
    assert plan(v).status.phase == c.PHASE_JOINING


def test_the_join_watchdog_releases_the_whole_set() -> None:
    v = view(
        phase=c.PHASE_JOINING,
        status=active(joinDeadline="2026-11-29T11:59:00Z"),
        live=LIVE,
        ready=frozenset(IDS[:3]),
    )
    step = plan(v)
    assert step.action is Action.RELEASE_SET and set(step.release_ids) == set(IDS)
    status, _, _ = outcome(v, step, ActionResult(ok=True))
    assert status.phase == c.PHASE_ACQUIRING and status.instance_ids == ()


def test_a_gang_that_loses_an_instance_is_released_whole() -> None:
    v = view(
        phase=c.PHASE_SATISFIED,
        status=active(),
        live=LIVE[1:],
        gone=frozenset({IDS[0]}),
        ready=frozenset(IDS[1:]),
    )
    step = plan(v)
    assert step.action is Action.RELEASE_SET
    assert set(step.release_ids) == set(IDS)
    assert step.events[0].reason == "GangBroken"


def test_an_instance_missing_from_a_describe_is_not_taken_for_gone() -> None:
    v = view(phase=c.PHASE_SATISFIED, status=active(), live=LIVE[1:], ready=frozenset(IDS))
    assert plan(v).action is Action.NONE


def test_claim_dropped_on_a_satisfied_pool_keeps_it_warm_and_tags_ec2() -> None:
    v = view(
        phase=c.PHASE_SATISFIED, claimed=False, status=active(), live=LIVE, ready=frozenset(IDS)
    )
    step = plan(v)
    assert step.action is Action.TAG_KEEP_WARM
    assert step.status.phase == c.PHASE_KEEP_WARM
    assert step.status.keep_warm_until == NOW + timedelta(minutes=10)


def test_zero_keep_warm_releases_at_once() -> None:
    v = view(
        phase=c.PHASE_SATISFIED,
        claimed=False,
        status=active(),
        live=LIVE,
        ready=frozenset(IDS),
        keep_warm="0s",
    )
    assert plan(v).status.phase == c.PHASE_RELEASING


def test_a_new_claim_during_keep_warm_reuses_the_set_without_launching() -> None:
    v = view(
        phase=c.PHASE_KEEP_WARM,
        status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(v)
    assert step.action is Action.TAG_KEEP_WARM and step.status.keep_warm_until is None
    # The whole warm set is Ready: Satisfied in this one step, nothing to wait for.
    assert step.status.phase == c.PHASE_SATISFIED and step.status.ready_nodes == len(IDS)
    assert step.status.join_deadline is None and step.requeue_after is None
    follow = plan(
        view(phase=c.PHASE_SATISFIED, status=step.status.to_dict(), live=LIVE, ready=frozenset(IDS))
    )
    assert follow.action is Action.NONE and follow.status == step.status


def test_a_warm_set_that_lost_a_node_is_reused_through_joining() -> None:
    v = view(
        phase=c.PHASE_KEEP_WARM,
        status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
        live=LIVE,
        ready=frozenset(IDS[1:]),
    )
    step = plan(v)
    assert step.action is Action.TAG_KEEP_WARM and step.status.phase == c.PHASE_JOINING
    assert step.status.join_deadline == NOW + timedelta(minutes=10)
    assert step.status.ready_nodes == len(IDS) - 1


def test_keep_warm_waits_until_expiry_then_releases() -> None:
    waiting = view(
        phase=c.PHASE_KEEP_WARM,
        claimed=False,
        status=active(keepWarmUntil="2026-11-29T12:05:00Z"),
        live=LIVE,
    )
    step = plan(waiting)
    assert step.action is Action.NONE and step.requeue_after == 300.0
    expired = view(
        phase=c.PHASE_KEEP_WARM,
        claimed=False,
        status=active(keepWarmUntil="2026-11-29T11:59:00Z"),
        live=LIVE,
    )
    assert plan(expired).status.phase == c.PHASE_RELEASING


def test_a_release_removes_the_set_and_keeps_the_prepared_stack() -> None:
    v = view(phase=c.PHASE_RELEASING, claimed=False, status=active(), live=LIVE)
    step = plan(v)
    assert step.action is Action.RELEASE_SET and set(step.release_ids) == set(IDS)
    status, _, _ = outcome(v, step, ActionResult(ok=True))
    assert status.phase == c.PHASE_RELEASING and status.instance_ids == ()
    done = plan(view(phase=c.PHASE_RELEASING, claimed=False, status=status.to_dict()))
    assert done.action is Action.NONE
    assert done.status.phase == c.PHASE_IDLE and done.status.idle_since == NOW
    assert done.events[0].reason == c.EventReason.RELEASED
    assert done.requeue_after == timedelta(days=7).total_seconds()


def test_a_zero_idle_stack_ttl_destroys_the_stack_with_the_set() -> None:
    v = view(
        phase=c.PHASE_RELEASING,
        claimed=False,
        status=active(),
        live=LIVE,
        idle_stack_ttl=timedelta(0),
    )
    step = plan(v)
    assert step.action is Action.DESTROY_STACK
    status, _, _ = outcome(v, step, ActionResult(ok=True))
    done = plan(
        view(
            phase=c.PHASE_RELEASING,
            claimed=False,
            status=status.to_dict(),
            prepared=False,
            idle_stack_ttl=timedelta(0),
        )
    )
    assert done.status.phase == c.PHASE_IDLE and done.status.instance_ids == ()
    assert done.status.idle_since is None


def test_an_idle_stack_is_kept_until_its_ttl_then_destroyed() -> None:
    since = NOW - timedelta(hours=1)
    waiting = plan(view(claimed=False, status={"idleSince": since.isoformat()}))
    assert waiting.action is Action.NONE
    assert waiting.requeue_after == (timedelta(days=7) - timedelta(hours=1)).total_seconds()
    expired = view(
        claimed=False,
        status={"idleSince": (NOW - timedelta(days=7, seconds=1)).isoformat()},
    )
    step = plan(expired)
    assert step.action is Action.DESTROY_STACK
    assert step.status.phase == c.PHASE_RELEASING and step.status.idle_since is None
    assert step.events[0].reason == c.EventReason.STACK_IDLE
    assert "stackOperations.idleStackTTL (168h0m0s)" in step.events[0].message


def test_an_idle_pool_with_a_stack_but_no_stamp_starts_its_idle_time_now() -> None:
    step = plan(view(claimed=False))
    assert step.action is Action.NONE and step.status.idle_since == NOW
    assert plan(view(claimed=False, prepared=False)).status.idle_since is None


def test_a_claim_on_a_pool_with_a_kept_stack_launches_without_a_prepare() -> None:
    claimed = plan(view(status={"idleSince": NOW.isoformat(), "acquireGeneration": 2}))
    assert claimed.status.phase == c.PHASE_ACQUIRING and claimed.status.idle_since is None
    acquiring = view(phase=c.PHASE_ACQUIRING, status=claimed.status.to_dict())
    assert plan(acquiring).action is Action.LAUNCH


def test_strays_no_set_owns_are_terminated_first() -> None:
    stray = Instance("i-00000000000000099", "gen-7")
    v = view(phase=c.PHASE_SATISFIED, status=active(), live=(*LIVE, stray), ready=frozenset(IDS))
    step = plan(v)
    assert step.action is Action.RELEASE_SET and step.release_ids == (stray.instance_id,)


def test_instances_of_an_in_flight_launch_are_not_strays() -> None:
    marker = LaunchInProgress(client_token="t", mode="runinstances", group="gen-3", started_at=NOW)
    v = view(
        phase=c.PHASE_ACQUIRING,
        status={"acquireGeneration": 3, "launchInProgress": marker.to_dict()},
        live=tuple(Instance(i, "gen-3") for i in IDS),
    )
    assert plan(v).action is Action.LAUNCH


@pytest.mark.parametrize("phase", [c.PHASE_SATISFIED, c.PHASE_KEEP_WARM, c.PHASE_IDLE])
def test_deletion_releases_everything_before_the_finalizer_comes_off(phase: str) -> None:
    busy = view(
        phase=phase,
        status=active() if phase != c.PHASE_IDLE else {},
        live=LIVE if phase != c.PHASE_IDLE else (),
        deleting=True,
        prepared=phase != c.PHASE_IDLE,
    )
    step = plan(busy)
    if phase == c.PHASE_IDLE:
        assert step.action is Action.REMOVE_FINALIZER
    else:
        assert step.action is Action.DESTROY_STACK


# --- Capacity Blocks: a hold before the start, a release before the end -----------------

BLOCK_END = NOW + timedelta(hours=2)
MARGIN = timedelta(minutes=35)  # the default block release margin


def test_a_block_not_yet_active_holds_at_zero_until_its_start() -> None:
    v = view(phase=c.PHASE_ACQUIRING, status={"acquireGeneration": 3, "consecutiveShortfalls": 1})
    step = plan(v)
    starts = NOW + timedelta(minutes=20)
    message = "Capacity Block cr-0fedcba9876543210 is scheduled and starts at 12:20"
    status, delay, events = outcome(
        v,
        step,
        ActionResult(
            ok=False,
            failure=FailureKind.NOT_ACTIVE,
            reason="ReservationNotActive",
            message=message,
            starts_at=starts,
        ),
    )
    # Nothing reached EC2: no shortfall counted (Kueue keeps the quota), generation stays.
    assert status.phase == c.PHASE_ACQUIRING and status.instance_ids == ()
    assert status.consecutive_shortfalls == 1 and status.acquire_generation == 3
    assert status.launch_in_progress is None
    assert status.last_error is not None and status.last_error.message == message
    assert delay == 20 * 60
    assert [(e.type, e.reason) for e in events] == [("Normal", "ReservationNotActive")]


def test_a_hold_without_a_known_start_looks_again_after_a_while() -> None:
    v = view(phase=c.PHASE_ACQUIRING)
    step = plan(v)
    _, delay, _ = outcome(
        v,
        step,
        ActionResult(ok=False, failure=FailureKind.NOT_ACTIVE, reason="ReservationNotActive"),
    )
    assert delay == 60.0


def test_a_launch_on_a_block_records_its_end() -> None:
    v = view(phase=c.PHASE_ACQUIRING)
    step = plan(v)
    result = ActionResult(ok=True, instance_ids=IDS, block_ends_at=BLOCK_END)
    status, _, _ = outcome(v, step, result)
    assert status.capacity_block_ends_at == BLOCK_END


def test_a_satisfied_gang_on_a_block_wakes_up_at_its_release_time() -> None:
    v = view(
        phase=c.PHASE_SATISFIED,
        status=active(capacityBlockEndsAt=BLOCK_END.isoformat(), readyNodes=4),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(v)
    assert step.action is Action.NONE
    assert step.requeue_after == (BLOCK_END - MARGIN - NOW).total_seconds()


@pytest.mark.parametrize("phase", [c.PHASE_JOINING, c.PHASE_SATISFIED])
def test_a_gang_on_a_block_is_released_before_the_block_ends(phase: str) -> None:
    ends = NOW + MARGIN - timedelta(seconds=1)
    v = view(
        phase=phase,
        status=active(capacityBlockEndsAt=ends.isoformat(), readyNodes=4),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(v)
    assert step.action is Action.RELEASE_SET and set(step.release_ids) == set(IDS)
    assert [e.reason for e in step.events] == ["CapacityBlockEnding"]
    assert step.status.last_error is not None
    assert step.status.last_error.reason == "CapacityBlockEnding"
    assert "EC2 reclaims" in step.status.last_error.message
    released, _, _ = outcome(v, step, ActionResult(ok=True))
    assert released.instance_ids == () and released.capacity_block_ends_at is None
    assert released.phase == c.PHASE_ACQUIRING


def test_a_warm_set_on_an_ending_block_is_released() -> None:
    ends = NOW + MARGIN
    v = view(
        phase=c.PHASE_KEEP_WARM,
        claimed=False,
        status=active(
            capacityBlockEndsAt=ends.isoformat(),
            keepWarmUntil=(NOW + timedelta(minutes=5)).isoformat(),
        ),
        live=LIVE,
    )
    step = plan(v)
    assert step.status.phase == c.PHASE_RELEASING
    assert [e.reason for e in step.events] == ["CapacityBlockEnding"]


def test_a_warm_set_wakes_up_for_whichever_comes_first() -> None:
    v = view(
        phase=c.PHASE_KEEP_WARM,
        claimed=False,
        status=active(
            capacityBlockEndsAt=(NOW + MARGIN + timedelta(minutes=2)).isoformat(),
            keepWarmUntil=(NOW + timedelta(minutes=5)).isoformat(),
        ),
        live=LIVE,
    )
    assert plan(v).requeue_after == 120.0


def test_entering_keep_warm_on_a_block_wakes_up_for_its_release() -> None:
    v = view(
        phase=c.PHASE_SATISFIED,
        claimed=False,
        status=active(capacityBlockEndsAt=(NOW + MARGIN + timedelta(minutes=3)).isoformat()),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(v)
    assert step.status.phase == c.PHASE_KEEP_WARM and step.requeue_after == 180.0
