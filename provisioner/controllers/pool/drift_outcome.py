"""What a launch leaves when EC2 says a resource of the pool's stack is missing: a pure
function, called by `outcomes` for a launch whose failure is `FailureKind.NOT_PREPARED`.

Three answers, chosen from the resource (`ActionResult.gone`, a type) and from what the
pool's stack did last (`status.lastStackOperation`):

- **Drift**: the resource was deleted outside the stack. The next pass prepares with a
  refresh, which drops it from the state and makes it again (`pulumi_driver.drift`).
- **Propagation** (the instance profile only): the stack made or verified the profile
  with IAM in its last operation (a prepare or a repair), and EC2 does not see it yet.
  IAM is eventually consistent ("Changes that I make are not always immediately
  visible", IAM User Guide), so this is a wait, retried with backoff, never a config
  error, for `PROPAGATION_WAITS` tries. Past that, a prepare's profile gets a refresh
  (someone may have deleted it since), and a repair's is a configuration failure.
- **Configuration**: the stack was refreshed and made the resource again just before
  this launch, and EC2 still misses it. No loop: the launch is retried after the config
  delay, as for any configuration failure.

The generation: a refused launch ran nothing, so it stays, except for the instance
profile, where EC2 answers an instant fleet with the refusal in its ``Errors`` list and
keeps that fleet as the answer to its ClientToken ("Ensuring idempotency in Amazon EC2 API
requests"): replaying the token would return the same refusal after the profile is back.
So a refusal for the profile moves the generation in either mode; nothing launched under
it, so no instance can be orphaned by the move.
"""

from __future__ import annotations

from typing import Final

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.gangnodepool import GangNodePoolStatus, LastError, StackOperation
from provisioner.cloud.stack_gone import StackResource
from provisioner.controllers.pool.status import changed
from provisioner.controllers.pool.steps import ActionResult, AnyView, Event

__all__ = ["PROPAGATION_WAITS", "drift_outcome"]

# Waits for EC2 to see a profile IAM has: from retryBackoff.initial, doubling (5 s to
# 160 s by default, about five minutes in all), longer than IAM usually takes to propagate.
PROPAGATION_WAITS: Final = 6
# The stack operations that made or verified the profile with IAM just before the launch.
_PROFILE_JUST_SEEN: Final = frozenset({StackOperation.PREPARE, StackOperation.REPAIR})


def drift_outcome(
    view: AnyView, status: GangNodePoolStatus, result: ActionResult, err: LastError
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    """The status, the wait and the Events of a launch refused for a missing resource."""
    status = changed(status, launch_in_progress=None)
    profile = result.gone is StackResource.INSTANCE_PROFILE
    if profile:
        status = changed(status, acquire_generation=status.acquire_generation + 1)
    last = status.last_stack_operation
    if profile and last in _PROFILE_JUST_SEEN:
        if status.consecutive_failures < PROPAGATION_WAITS:
            return _propagation_wait(view, status, err)
        if last is StackOperation.PREPARE:
            return _drift(status, err)
    elif last is not StackOperation.REPAIR:
        return _drift(status, err)
    message = (
        f"{err.message} The pool's stack was refreshed and the resource made again just "
        "before this launch, and EC2 still finds it missing: something deletes the pool's "
        "resources as they are made, or the controller's role cannot see them. Fix that; "
        "the launch is tried again after the configuration delay."
    )
    err = err.model_copy(update={"kind": FailureKind.CONFIG, "message": message})
    return (
        changed(status, last_error=err),
        view.timings.config_delay,
        (Event(c.EVENT_WARNING, err.reason, err.message),),
    )


def _drift(
    status: GangNodePoolStatus, err: LastError
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    return (
        changed(status, stack_drift=err.message, last_error=err),
        0.0,
        (
            Event(
                c.EVENT_WARNING,
                c.EventReason.STACK_DRIFT,
                f"{err.message} Refreshing the pool's stack before the next launch.",
            ),
        ),
    )


def _propagation_wait(
    view: AnyView, status: GangNodePoolStatus, err: LastError
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    failures = status.consecutive_failures + 1
    waiting = err.model_copy(
        update={
            "reason": c.EventReason.INSTANCE_PROFILE_PROPAGATING,
            "kind": FailureKind.RETRYABLE,
            "message": (
                "EC2 does not see the node instance profile yet, which the pool's stack made "
                "or found in IAM just before this launch (IAM is eventually consistent); "
                f"waiting, try {failures} of {PROPAGATION_WAITS}. EC2 said: {err.message}"
            ),
        }
    )
    # Said once per wait, not on every try.
    said = status.last_error is not None and status.last_error.reason == waiting.reason
    events = () if said else (Event(c.EVENT_NORMAL, waiting.reason, waiting.message),)
    return (
        changed(status, last_error=waiting, consecutive_failures=failures),
        view.timings.backoff(failures),
        events,
    )
