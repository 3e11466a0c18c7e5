"""The chaos run's "launch" window is judged from EC2's own record, so a kill before the
launch call reached EC2 is a miss, never a landed kill (tests/chaos/landing.py).

Each row is what the emulator's logs say with the controller dead: the consumed-call log
(did the controller's launch call reach the hold?) and the launch log (did EC2 run it?).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.landing import (
    ANSWERED,
    IN_FLIGHT,
    RETURNED,
    UNSENT,
    LaunchRecord,
    launch_record,
    launch_window,
)

pytestmark = pytest.mark.unit

CONTROLLER = "controller-key"


def _delay(action: str = "RunInstances", by: str = CONTROLLER, after: bool = False) -> Any:
    return {"switch": "delay", "action": action, "by": by, "after": after, "remaining": 0}


def test_a_kill_before_the_launch_reached_ec2_is_not_the_launch_window() -> None:
    # The marker is saved and EC2 holds no instance, as in a kill during the call; but the
    # emulator never took the call into its hold: it was never sent.
    record = launch_record([], 0, "RunInstances", CONTROLLER, group_live=False)
    assert launch_window(record) == UNSENT


def test_a_kill_while_ec2_holds_the_call_is_the_launch_window() -> None:
    record = launch_record([_delay()], 0, "RunInstances", CONTROLLER, group_live=False)
    assert launch_window(record) == IN_FLIGHT


@pytest.mark.parametrize(
    ("consumed", "why"),
    [
        ([_delay(by="node-simulator")], "another client took the hold"),
        ([_delay(action="CreateFleet")], "another action's hold"),
        ([_delay(after=True)], "a hold after EC2 ran the call"),
        ([{"switch": "fault", "action": "RunInstances", "by": CONTROLLER}], "a fault, no hold"),
    ],
)
def test_only_the_controllers_hold_before_ec2_runs_the_call_counts(
    consumed: list[dict[str, Any]], why: str
) -> None:
    record = launch_record(consumed, 0, "RunInstances", CONTROLLER, group_live=False)
    assert launch_window(record) == UNSENT, why


def test_a_call_ec2_already_ran_is_no_longer_in_flight() -> None:
    # Held, then run (refused, or its instances not listed yet) before the state was read.
    record = launch_record([_delay()], 1, "RunInstances", CONTROLLER, group_live=False)
    assert launch_window(record) == ANSWERED


def test_instances_of_the_generation_running_are_the_ec2_returned_window() -> None:
    assert launch_window(LaunchRecord(held=True, ran=True, group_live=True)) == RETURNED
