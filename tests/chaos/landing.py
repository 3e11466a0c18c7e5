"""Where a kill aimed at the "launch" window landed, judged from EC2's own record.

A launch marker saved and no instance in EC2 cannot tell a launch call in flight from one
never sent: the controller saves the marker, then builds and sends the call, and a kill
between the two leaves the same status and the same empty EC2 as a kill during the call.
So the chaos run holds the controller's launch call in the emulator (a delay switch scoped
to the controller's access key) and reads, with the controller dead, what the emulator
recorded since this Workload's life began:

- its consumed-call log: the hold was taken, so the call reached EC2;
- its launch log: EC2 has not run a launch call yet, so the call was still held.

Only both together are a kill in flight. `launch_window` is the pure judgement, fed by
`tests/chaos/test_chaos_kill.py` and by `tests/unit/test_chaos_landing.py`, which gives it a
kill before the launch reached EC2 (STYLE 16: the check must be able to fail).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

# The launch window proper: the call reached EC2 and EC2 had not run it at the kill.
IN_FLIGHT: Final = "launch"
# EC2 runs instances of the marker's generation and the status has no IDs.
RETURNED: Final = "ec2-returned"
# The marker is saved and the call never reached EC2: not the launch window.
UNSENT: Final = "launch-unsent"
# EC2 ran the call (a refusal, or instances not listed yet) before the state was read.
ANSWERED: Final = "launch-answered"


@dataclass(frozen=True)
class LaunchRecord:
    """What EC2 recorded of this life's launch, read with the controller dead."""

    # The controller's launch call was taken into the hold (the consumed-call log).
    held: bool
    # EC2 ran a launch call of this life (the launch log), whatever its answer.
    ran: bool
    # EC2 runs instances of the marker's generation.
    group_live: bool


def launch_record(
    consumed: Iterable[Mapping[str, Any]],
    launches_since: int,
    action: str,
    client: str,
    group_live: bool,
) -> LaunchRecord:
    """The record from the emulator's logs: `consumed` is the consumed-call log since the
    life began, `launches_since` the launch calls EC2 ran since then."""
    held = any(
        entry.get("switch") == "delay"
        and entry.get("action") == action
        and entry.get("by") == client
        and not entry.get("after")
        for entry in consumed
    )
    return LaunchRecord(held=held, ran=launches_since > 0, group_live=group_live)


def launch_window(record: LaunchRecord) -> str:
    """The window a kill with the launch marker saved and no IDs in the status landed in."""
    if record.group_live:
        return RETURNED
    if record.ran:
        return ANSWERED
    return IN_FLIGHT if record.held else UNSENT
