"""The pool life cycle while the pool's stack operation runs on the executor, and what its
result leaves when it comes back: one row per case."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import StackOperation, StackResult
from provisioner.controllers.pool.outcomes import settle
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import (
    GIVES_WAY,
    STACK_ACTIONS,
    Action,
    ActionResult,
    AnyView,
    StackPriority,
    StackRead,
    Step,
    stack_priority,
)
from tests.support.pool_views import IDS, LIVE, NOW, active, view


def busy(v: AnyView, running: Action) -> AnyView:
    return replace(v, stack_operation=running)


def with_stack(v: AnyView, prepared: bool) -> AnyView:
    """`v` with the stack's answer `prepared`, where its row reads the stack."""
    return replace(v, stack=StackRead(prepared)) if isinstance(v.stack, StackRead) else v


# (case, the view, the operation running): every step that would touch the stack, read
# it, or decide from it waits; the pool's status is left as it was.
WAITS: list[tuple[str, AnyView, Action]] = [
    (
        "no launch while its prepare runs (template being changed)",
        view(phase=Phase.ACQUIRING, prepared=True),
        Action.PREPARE_STACK,
    ),
    (
        "no second prepare",
        view(phase=Phase.ACQUIRING, prepared=False),
        Action.PREPARE_STACK,
    ),
    (
        "no second record",
        view(phase=Phase.JOINING, status=active(recorded=False), live=LIVE),
        Action.RECORD_SET,
    ),
    (
        "no release while a record runs, even past the join deadline",
        view(
            phase=Phase.JOINING,
            status=active(joinDeadline=(NOW - timedelta(seconds=1)).isoformat()),
            live=LIVE,
        ),
        Action.RECORD_SET,
    ),
    (
        "a set being released is not made Satisfied by nodes that turn Ready meanwhile",
        view(
            phase=Phase.JOINING,
            status=active(
                releaseInProgress={
                    "startedAt": (NOW - timedelta(seconds=1)).isoformat(),
                    "reason": "JoinDeadlineExceeded",
                    "instanceIds": list(IDS),
                }
            ),
            live=LIVE,
            ready=frozenset(IDS),
        ),
        Action.RELEASE_SET,
    ),
    (
        "no keep-warm tag while a record runs",
        view(
            phase=Phase.KEEP_WARM,
            claimed=False,
            status=active(readyNodes=4, keepWarmUntil="2026-11-29T12:10:00Z"),
            live=LIVE,
            ready=frozenset(IDS),
        ),
        Action.RECORD_SET,
    ),
    (
        "a destroy's pool is not called released before the destroy ends",
        view(phase=Phase.RELEASING, claimed=False, prepared=False),
        Action.DESTROY_STACK,
    ),
    (
        "the finalizer stays on while the destroy runs",
        view(phase=Phase.RELEASING, claimed=False, prepared=False, deleting=True),
        Action.DESTROY_STACK,
    ),
    (
        "no strays release beside another operation",
        view(phase=Phase.IDLE, claimed=False, live=LIVE),
        Action.PREPARE_STACK,
    ),
]


@pytest.mark.parametrize(("v", "running"), [(v, r) for _, v, r in WAITS], ids=[w[0] for w in WAITS])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "not-prepared"])
def test_a_step_that_touches_the_stack_waits_for_its_operation(
    v: AnyView, running: Action, prepared: bool
) -> None:
    # The stack is not asked while an operation runs: whatever it says, the step waits.
    free = plan(with_stack(v, prepared))
    assert free.action is not Action.NONE or free.status.phase != v.status.phase
    step = plan(busy(with_stack(v, prepared), running))
    assert step.action is Action.NONE
    assert step.status == v.status
    assert step.requeue_after is None, "the executor queues the pool when the operation ends"
    assert step.events == ()
    assert running.value in step.why


def test_a_set_becomes_satisfied_while_its_record_runs() -> None:
    v = view(
        phase=Phase.JOINING,
        status=active(recorded=False),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(busy(v, Action.RECORD_SET))
    assert step.action is Action.NONE
    assert step.status.phase == Phase.SATISFIED and step.status.ready_nodes == 4
    assert [e.reason for e in step.events] == [c.EventReason.SATISFIED]


def test_a_set_goes_warm_while_its_record_runs() -> None:
    v = view(
        phase=Phase.SATISFIED,
        claimed=False,
        status=active(recorded=False),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(busy(v, Action.RECORD_SET))
    assert step.action is Action.NONE and step.status.phase == Phase.KEEP_WARM
    assert [e.reason for e in step.events] == [c.EventReason.KEEP_WARM]


def test_a_node_leaving_is_seen_while_a_record_runs() -> None:
    v = view(phase=Phase.SATISFIED, status=active(), live=LIVE, ready=frozenset(IDS[:3]))
    step = plan(busy(v, Action.RECORD_SET))
    assert step.action is Action.NONE and step.status.phase == Phase.JOINING
    assert step.status.ready_nodes == 3


def test_the_ready_count_is_kept_when_the_step_waits() -> None:
    v = view(
        phase=Phase.JOINING,
        status=active(recorded=False, readyNodes=1),
        live=LIVE,
        ready=frozenset(IDS[:3]),
    )
    step = plan(busy(v, Action.RECORD_SET))
    assert step.action is Action.NONE and step.status.ready_nodes == 3
    assert step.status.phase == Phase.JOINING


def record_step(group: str = "gen-0") -> Step:
    started = view(phase=Phase.JOINING, status=active(group, recorded=False))
    return Step(Action.RECORD_SET, started.status)


def test_a_record_lands_on_the_status_the_pool_reached_meanwhile() -> None:
    now = view(phase=Phase.SATISFIED, status=active(recorded=False, readyNodes=4), live=LIVE)
    status, requeue, events = settle(now, record_step(), ActionResult(True))
    assert status.phase == Phase.SATISFIED and status.ready_nodes == 4
    assert status.last_stack_operation is StackOperation.RECORD and status.recorded_group == "gen-0"
    assert status.last_stack_result == StackResult.succeeded()
    assert requeue == 0.0 and events == ()


def test_a_failed_record_counts_on_top_of_the_failures_now() -> None:
    now = view(
        phase=Phase.SATISFIED,
        status=active(recorded=False, consecutiveFailures=2),
        live=LIVE,
    )
    failed = ActionResult(
        False, failure=FailureKind.RETRYABLE, reason="AwsUnavailable", message="503"
    )
    status, requeue, events = settle(now, record_step(), failed)
    assert status.phase == Phase.SATISFIED
    assert status.consecutive_failures == 3
    assert status.last_stack_result == StackResult.failed("AwsUnavailable")
    assert status.last_error is not None and status.last_error.reason == "AwsUnavailable"
    assert requeue == now.timings.backoff_base.total_seconds() * 4
    assert [e.reason for e in events] == ["AwsUnavailable"]


def test_a_record_of_a_set_no_longer_active_is_dropped() -> None:
    now = view(phase=Phase.JOINING, status=active("gen-1", recorded=False), live=LIVE)
    status, requeue, events = settle(now, record_step("gen-0"), ActionResult(True))
    assert status == now.status and requeue == 0.0 and events == ()


def test_a_destroy_lands_on_the_releasing_status() -> None:
    started = view(phase=Phase.RELEASING, claimed=False, status=active())
    status, _, _ = settle(started, Step(Action.DESTROY_STACK, started.status), ActionResult(True))
    assert status.phase == Phase.RELEASING and status.instance_ids == ()
    assert status.last_stack_operation is StackOperation.DESTROY


PRIORITIES: list[tuple[Action, StackPriority]] = [
    (Action.RELEASE_SET, StackPriority.RELEASE),
    (Action.PREPARE_STACK, StackPriority.PREPARE),
    (Action.RECORD_SET, StackPriority.RECORD),
    (Action.DESTROY_STACK, StackPriority.DESTROY),
]


@pytest.mark.parametrize(("action", "priority"), PRIORITIES)
def test_releases_go_first_records_after_prepares_and_destroys_last(
    action: Action, priority: StackPriority
) -> None:
    assert stack_priority(action) is priority


def test_the_priorities_are_ordered() -> None:
    assert (
        StackPriority.RELEASE < StackPriority.PREPARE < StackPriority.RECORD < StackPriority.DESTROY
    )


def test_every_stack_action_has_a_priority_and_only_a_record_gives_way() -> None:
    assert {action for action, _ in PRIORITIES} == STACK_ACTIONS
    assert {Action.RECORD_SET} == GIVES_WAY
