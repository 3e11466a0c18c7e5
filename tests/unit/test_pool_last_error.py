"""A failed step's `lastError` and stack result last until that step (or one that makes it
moot) succeeds, and no longer: a pool that recovered shows no stale error, and a pool still
failing at one thing is not cleared by another thing's success."""

from __future__ import annotations

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import GangNodePoolStatus, StackOperation, StackResult
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult
from tests.support.pool_views import IDS, LIVE, view

ALL = frozenset(IDS)
S3_DOWN = ActionResult(
    False,
    failure=FailureKind.RETRYABLE,
    reason="BackendUnavailable",
    message="The Pulumi state backend failed during the update: 500",
)
OK = ActionResult(True)


def joining(**status: object) -> dict[str, object]:
    return {
        "instanceIds": list(IDS),
        "activeGroup": "gen-0",
        "acquireGeneration": 1,
        "lastStackOperation": "prepare",
        **status,
    }


def test_a_record_that_failed_during_an_outage_leaves_no_error_once_the_next_succeeds() -> None:
    given = view(phase=Phase.JOINING, status=joining(), live=LIVE)
    step = plan(given)
    assert step.action is Action.RECORD_SET
    failed, _, _ = outcome(given, step, S3_DOWN)
    assert failed.last_error is not None and failed.last_error.operation == "record"
    assert failed.last_error.kind is FailureKind.RETRYABLE
    assert failed.last_stack_result == StackResult.failed("BackendUnavailable")

    again = view(phase=Phase.JOINING, status=failed.to_dict(), live=LIVE)
    retry = plan(again)
    assert retry.action is Action.RECORD_SET
    recovered, _, _ = outcome(again, retry, OK)
    assert recovered.last_error is None
    assert (recovered.last_stack_result, recovered.recorded_group) == (
        StackResult.succeeded(),
        "gen-0",
    )


def test_a_set_released_after_its_record_failed_leaves_an_idle_pool_with_no_error() -> None:
    # The record failed while S3 was down; the claim dropped and keep-warm ran out before
    # any record succeeded; the set's removal from the stack then succeeded.
    failed = joining(
        lastError={
            "reason": "BackendUnavailable",
            "message": "S3 said 500",
            "operation": "record",
            "kind": "retryable",
        },
        lastStackResult="failed: BackendUnavailable",
        keepWarmUntil="2026-11-29T11:59:00Z",
        readyNodes=4,
    )
    expired = view(phase=Phase.KEEP_WARM, claimed=False, status=failed, live=LIVE, ready=ALL)
    releasing = plan(expired).status
    assert releasing.phase == Phase.RELEASING and releasing.last_error is not None
    given = view(phase=Phase.RELEASING, claimed=False, status=releasing.to_dict(), live=LIVE)
    step = plan(given)
    assert step.action is Action.RELEASE_SET, step.why
    released, _, _ = outcome(given, step, OK)
    assert released.last_error is None
    assert released.last_stack_operation is StackOperation.REMOVE_SET
    assert released.last_stack_result == StackResult.succeeded()


def test_a_shortfall_is_not_cleared_by_a_record_that_succeeds() -> None:
    shortfall = {
        "reason": "InsufficientInstanceCapacity",
        "message": "no p4d in us-east-1a",
        "operation": "launch",
        "kind": "capacity",
    }
    given = view(phase=Phase.JOINING, status=joining(lastError=shortfall), live=LIVE)
    step = plan(given)
    assert step.action is Action.RECORD_SET
    after, _, _ = outcome(given, step, OK)
    assert after.last_error is not None and after.last_error.reason == shortfall["reason"]


def test_a_failing_prepare_is_not_cleared_by_a_release_of_strays() -> None:
    broken = {
        "reason": "InvalidParameterValue",
        "message": "bad profile",
        "operation": "prepare",
        "kind": "config",
    }
    # A stray instance of the pool (no set holds it) is released while the prepare waits.
    given = view(
        phase=Phase.ACQUIRING,
        prepared=False,
        status={"lastError": broken, "consecutiveFailures": 1},
        live=LIVE[:1],
    )
    step = plan(given)
    assert step.action is Action.RELEASE_SET, step.why
    after, _, _ = outcome(given, step, OK)
    assert after.last_error is not None and after.last_error.operation == "prepare"


def test_a_destroyed_stack_clears_every_stack_step_s_error() -> None:
    for operation in ("prepare", "record", "release-set", "destroy"):
        status = GangNodePoolStatus.model_validate(
            {
                "phase": Phase.RELEASING,
                "lastError": {
                    "reason": "BackendUnavailable",
                    "message": "down",
                    "operation": operation,
                    "kind": "retryable",
                },
                "lastStackResult": "failed: BackendUnavailable",
            }
        )
        given = view(phase=Phase.RELEASING, claimed=False, deleting=True, status=status.to_dict())
        step = plan(given)
        assert step.action is Action.DESTROY_STACK, step.why
        after, _, _ = outcome(given, step, OK)
        assert after.last_error is None, operation
        assert after.last_stack_result == StackResult.succeeded()
