"""Fenced AWS clients: once the leadership fence closes, no mutating AWS call leaves the
process, whichever code path makes it.

DESIGN §11: one writer per EC2 account; a leader that lost its Lease writes nothing more to
EC2, checked before each mutating call wherever in the process it is made. Two processes
make EC2 calls: the controller (the reconcilers, the reaper) and the provider host that runs
the pool program's dynamic providers (launch templates, placement groups, instance profiles).

**One gate, at the last moment.** `fence_client` registers a handler for botocore's
``before-send`` event on a client: it runs right before each HTTP attempt (the first and
every retry botocore makes) leaves the process, after the request is built and signed. A
read (an action named Describe*, Get* or List*, as CloudTrail's ``readOnly`` events are)
always passes, so a standby can look. Any other action asks the gate, which refuses it
while the fence is closed; the request is then never sent. Every client of the controller
is built fenced (``ec2api.build_clients(gate=...)``) and every client the provider host
makes is fenced (``stacks.aws``), so no call site can forget: an action added tomorrow is a
write until its name says otherwise.

**In the controller** the gate is the stack driver's `Fence` (``pulumi_driver.fence``),
open while the token the elector last renewed is valid, on the monotonic clock, so a
replica resumed after SIGSTOP finds it closed before anything else runs. A refusal raises
`NotLeader` (``api.fencing``), which the engine's error handling does not catch.

**In the provider host** (a separate process: the shared host, or one the Pulumi CLI
starts) the gate reads a `FenceFile`: the controller's fence publishes ``valid_until`` (its
monotonic deadline) to a file in the driver's state directory on each renewal, and
"closed" when it closes; the host compares it with its own ``time.monotonic()``. On Linux
that is ``CLOCK_MONOTONIC``, one clock for every process on the machine, running on while
a process is stopped. So the host refuses a write once the deadline passed even while the
controller is paused (and so cannot say anything), and a host paused with its controller
refuses on resume. A refusal there raises `FencedCall`, an ordinary error: the provider
call fails, the engine run fails, and the controller, no longer leading, records nothing.
A missing or unreadable file reads as closed.

Alternatives weighed: routing the host's EC2 traffic through a forwarding endpoint in the
controller, as the CLI's S3 writes are (``pulumi_driver.s3_fence``), would re-sign EC2's
query protocol there and make every provider call wait on the controller; the deadline in
a file needs neither, and checks on the same clock the controller's own fence does.

Residual window, as for the stack writes (``pulumi_driver.fence``): a request that passed
the gate just before the deadline and was then held (the process stopped between the check
and the bytes leaving) reaches EC2 late; every launch carries its ClientToken, so a
repeated launch cannot double a gang.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from provisioner.api.fencing import NotLeader

__all__ = [
    "FENCE_FILE_VARIABLE",
    "READ_PREFIXES",
    "FenceFile",
    "FencedCall",
    "Gate",
    "fence_client",
    "file_gate",
    "host_gate",
    "is_read_only",
    "leader_gate",
]

# Names the provider host's fence file (set by the stack driver on every CLI process).
FENCE_FILE_VARIABLE: Final = "ATOMIC_GANG_FENCE_FILE"
READ_PREFIXES: Final = ("Describe", "Get", "List")

# An action's name -> the error refusing it, or None to let it go.
Gate = Callable[[str], BaseException | None]


class FencedCall(Exception):
    """A provider host's mutating call refused: its controller no longer surely leads."""


def is_read_only(action: str) -> bool:
    """Whether an AWS action (as AWS names it: DescribeInstances) only reads."""
    return action.startswith(READ_PREFIXES)


def fence_client(client: Any, gate: Gate) -> Any:
    """Ask ``gate`` before each attempt of each mutating call of ``client`` leaves the
    process; raise what it answers. Returns ``client``."""

    def check(event_name: str, **_: Any) -> None:
        action = event_name.rpartition(".")[2]  # before-send.<service>.<Action>
        if is_read_only(action):
            return
        refusal = gate(action)
        if refusal is not None:
            raise refusal

    # First: a handler that answers the request itself (moto in unit tests) must not run
    # the call before the gate has refused it.
    client.meta.events.register_first("before-send", check)
    return client


def leader_gate(is_open: Callable[[], bool]) -> Gate:
    """The controller's gate: `NotLeader` while ``is_open()`` says the fence is closed."""

    def gate(action: str) -> BaseException | None:
        if is_open():
            return None
        return NotLeader(f"{action} not sent: this replica no longer surely holds the leader Lease")

    return gate


class FenceFile:
    """The fence's deadline, as the controller publishes it for the provider host."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock

    def publish(self, valid_until: float | None) -> None:
        """Writes may go on until ``valid_until`` (monotonic); None: closed from now."""
        text = "closed" if valid_until is None else repr(valid_until)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(f"{text}\n", encoding="ascii")
        os.replace(partial, self.path)  # a reader sees the old deadline or the new one

    def valid_until(self) -> float | None:
        """The published deadline; None when closed, missing or unreadable."""
        try:
            value = float(self.path.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None
        return None if math.isnan(value) else value

    def is_open(self) -> bool:
        deadline = self.valid_until()
        return deadline is not None and self._clock() < deadline


def file_gate(fence: FenceFile) -> Gate:
    """The provider host's gate: `FencedCall` unless the published deadline is ahead."""

    def gate(action: str) -> BaseException | None:
        if fence.is_open():
            return None
        return FencedCall(
            f"{action} not sent: the controller that runs this provider host no longer surely "
            f"holds the leader Lease (fence file {fence.path})"
        )

    return gate


def host_gate(environ: dict[str, str] | None = None) -> Gate | None:
    """The gate named by the environment the stack driver gives the provider host, or None
    when it names none (a `pulumi up` an operator runs by hand)."""
    path = (environ if environ is not None else os.environ).get(FENCE_FILE_VARIABLE)
    return file_gate(FenceFile(Path(path))) if path else None
