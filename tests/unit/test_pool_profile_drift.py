"""A launch EC2 refuses because it does not know the pool's instance profile, table-driven on
what the pool's stack did last (`drift_outcome`):

- after a set's record or removal (the profile was there for the last gang): drift, so the
  next pass prepares with a refresh, which makes the profile again;
- right after a prepare or a repair (the stack made or found the profile in IAM): a wait
  for IAM to propagate, retried with backoff, told once, never a config error;
- waits run out: a prepare's profile is refreshed after all; a repair's is a configuration
  failure (no refresh loop).

Every answer moves the generation: an instant fleet keeps the refusal as its token's
answer. The launch template's and placement group's answers keep theirs
(``test_pool_stack_drift``)."""

from __future__ import annotations

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import StackOperation
from provisioner.cloud.stack_gone import StackResource
from provisioner.controllers.pool.drift_outcome import PROPAGATION_WAITS
from provisioner.controllers.pool.outcomes import outcome
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, ActionResult, AnyView
from tests.support.pool_views import TIMINGS, view

pytestmark = pytest.mark.unit

MESSAGE = (
    "RunInstances failed (InvalidParameterValue: Value (arn:aws:iam::1:instance-profile/p) "
    "for parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN)."
)


def _acquiring(last: StackOperation, failures: int = 0) -> AnyView:
    status = {
        "acquireGeneration": 3,
        "lastStackOperation": last.value,
        "consecutiveFailures": failures,
    }
    return view(phase=Phase.ACQUIRING, status=status)


def _unknown_profile() -> ActionResult:
    return ActionResult(
        False,
        failure=FailureKind.NOT_PREPARED,
        reason="InstanceProfileNotFound",
        message=MESSAGE,
        gone=StackResource.INSTANCE_PROFILE,
    )


# (what the stack did last, failures so far, the next step, its wait, the Event's reason)
CASES = [
    (StackOperation.REMOVE_SET, 0, "refresh", 0.0, c.EventReason.STACK_DRIFT),
    (StackOperation.RECORD, 0, "refresh", 0.0, c.EventReason.STACK_DRIFT),
    (
        StackOperation.REPAIR,
        0,
        "launch",
        TIMINGS.backoff(1),
        c.EventReason.INSTANCE_PROFILE_PROPAGATING,
    ),
    (
        StackOperation.PREPARE,
        2,
        "launch",
        TIMINGS.backoff(3),
        c.EventReason.INSTANCE_PROFILE_PROPAGATING,
    ),
    (StackOperation.PREPARE, PROPAGATION_WAITS, "refresh", 0.0, c.EventReason.STACK_DRIFT),
    (
        StackOperation.REPAIR,
        PROPAGATION_WAITS,
        "launch",
        TIMINGS.config_delay,
        "InstanceProfileNotFound",
    ),
]


@pytest.mark.parametrize(("last", "failures", "then", "wait", "said"), CASES)
def test_an_unknown_instance_profile_is_drift_a_wait_or_config_by_what_the_stack_did_last(
    last: StackOperation, failures: int, then: str, wait: float, said: str
) -> None:
    given = _acquiring(last, failures)
    step = plan(given)
    assert step.action is Action.LAUNCH
    status, waited, events = outcome(given, step, _unknown_profile())

    assert waited == wait
    assert status.acquire_generation == 4  # the fleet's token is spent on the refusal
    assert status.launch_in_progress is None
    assert [e.reason for e in events] == [said]
    after = view(phase=status.phase, status=status.model_dump(mode="json", by_alias=True))
    nxt = plan(after)
    if then == "refresh":
        assert status.stack_drift == MESSAGE
        assert nxt.action is Action.PREPARE_STACK and nxt.refresh_stack
    else:
        assert status.stack_drift is None
        assert nxt.action is Action.LAUNCH
    assert status.last_error is not None
    expected_kind = {
        c.EventReason.STACK_DRIFT: FailureKind.NOT_PREPARED,
        c.EventReason.INSTANCE_PROFILE_PROPAGATING: FailureKind.RETRYABLE,
        "InstanceProfileNotFound": FailureKind.CONFIG,
    }[said]
    assert status.last_error.kind is expected_kind


def test_the_wait_is_told_once_not_on_every_try() -> None:
    given = _acquiring(StackOperation.REPAIR)
    status, _, events = outcome(given, plan(given), _unknown_profile())
    assert [e.type for e in events] == [c.EVENT_NORMAL]
    again = view(phase=status.phase, status=status.model_dump(mode="json", by_alias=True))
    status, wait, events = outcome(again, plan(again), _unknown_profile())
    assert events == ()
    assert status.consecutive_failures == 2 and wait == TIMINGS.backoff(2)
