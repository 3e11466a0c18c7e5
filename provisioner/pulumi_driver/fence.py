"""The fence: whether this replica may write a pool's stack right now, and the CLI processes
it kills the moment it may not.

Owned by the stack driver (``driver``); opened and extended by the leader elector after each
successful renewal (``assembly`` wires `LeaderElector(on_renewed=fence.extend)`), closed by
the driver's `step_down()` and by its own watch when the renew deadline passes unrenewed.

The token is the Lease's term as the elector last renewed it: holder, ``leaseTransitions``,
and a *local monotonic* ``valid_until`` = the start of the last successful renewal + the
renew deadline. Another replica may take the Lease only after it saw the record unchanged
for the lease duration on its own clock, which started after that renewal began; since
``renewDeadline < leaseDuration`` (the settings refuse anything else), every write checked
before ``valid_until`` is checked before anyone else can lead. Monotonic time keeps running
while the process is stopped (SIGSTOP), so a replica resumed after a pause finds its fence
closed before it does anything else — the check needs no message from anyone.

Published, for the provider host's EC2 calls, to a file (`publish_to`, ``cloud.fencing``):
the host checks the deadline on the same machine-wide monotonic clock before each mutating
call. The controller's own EC2 calls check `token()` (``assembly`` builds its AWS clients
with this fence's gate).

Checked before each stack write: by the driver before each operation (`check`, against the
term it recovered under), by `FencedCommand` before starting a CLI command that changes a
stack, and by the S3 fence (``s3_fence``) before forwarding each write the CLI sends to the
state bucket. When the fence closes, every CLI process this driver started is killed with
its process group (each CLI runs in a session of its own, so its plugins go with it).

Residual window, stated plainly: a write checked just before ``valid_until`` and then held
(the process paused between the check and the bytes leaving, or the request slow in the
network) can still reach S3 after ``valid_until``; it lands before another leader exists
only if it arrives within ``leaseDuration - renewDeadline`` of the check.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from pulumi import automation as auto
from pulumi.automation.errors import create_command_error

from provisioner.cloud.fencing import FenceFile

__all__ = [
    "STATE_CHANGING_COMMANDS",
    "UNFENCED",
    "Fence",
    "FenceClosed",
    "FencedCommand",
    "FencingToken",
    "changes_state",
]

log = logging.getLogger(__name__)

# CLI commands that write a stack's state or its lock; every other one (version, stack ls,
# stack export, stack output, config in the work dir) only reads, and a standby may run it.
STATE_CHANGING_COMMANDS: Final = frozenset(
    {
        ("up",),
        ("refresh",),
        ("destroy",),
        ("cancel",),
        ("import",),
        ("state",),
        ("stack", "init"),
        ("stack", "rm"),
        ("stack", "import"),
        ("stack", "rename"),
    }
)


class FenceClosed(Exception):
    """This replica may not write a stack now (it does not lead, or no longer surely)."""


@dataclass(frozen=True)
class FencingToken:
    """One term of leadership as the elector last renewed it."""

    holder: str
    lease_transitions: int
    # time.monotonic() until which no other replica can lead.
    valid_until: float
    # time.monotonic() from which every earlier holder's fence is closed: when its Lease
    # ran out on our clock (or when we took a Lease nobody held).
    others_fenced_since: float

    def same_term(self, other: FencingToken) -> bool:
        return (self.holder, self.lease_transitions) == (other.holder, other.lease_transitions)


# The token of a replica that leads by configuration (leader election disabled).
UNFENCED: Final = FencingToken("", 0, float("inf"), float("-inf"))


class Fence:
    """Open while the token is valid; thread-safe. ``enforced=False`` (leader election
    disabled: one replica by configuration) is open until `close()`, and again once
    extended with `UNFENCED`."""

    def __init__(self, *, enforced: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.enforced = enforced
        self._clock = clock
        self._cond = threading.Condition()
        self._token: FencingToken | None = None if enforced else UNFENCED
        self._on_close: list[Callable[[str], None]] = []
        self._watch: threading.Thread | None = None
        self._files: list[FenceFile] = []

    def publish_to(self, file: FenceFile) -> None:
        """Keep ``file`` holding this fence's deadline ("closed" while closed), for the
        processes that check it on their own (the provider host, ``cloud.fencing``)."""
        with self._cond:
            self._files.append(file)
            file.publish(self._token.valid_until if self._token is not None else None)

    def on_close(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(why)`` each time the fence closes (explicitly or by expiry)."""
        self._on_close.append(callback)

    def extend(self, token: FencingToken) -> None:
        """A renewal succeeded: writes may go on until ``token.valid_until``."""
        with self._cond:
            self._token = token
            self._publish(token.valid_until)
            self._cond.notify_all()
            if self._watch is None and token.valid_until != float("inf"):
                self._watch = threading.Thread(target=self._expire, name="fence", daemon=True)
                self._watch.start()

    def close(self, why: str) -> None:
        """No write from now on; the CLI processes are killed (``on_close``)."""
        with self._cond:
            was_open = self._token is not None
            self._token = None
            self._publish(None)
            self._cond.notify_all()
        if was_open:
            self._closed(why)

    def token(self) -> FencingToken | None:
        """The valid token, or None when the fence is closed."""
        with self._cond:
            token = self._token
        if token is None or self._clock() >= token.valid_until:
            return None
        return token

    def check(self, term: FencingToken | None = None) -> FencingToken:
        """The valid token (of ``term``'s term, when given); `FenceClosed` otherwise."""
        token = self.token()
        if token is None:
            raise FenceClosed("this replica does not hold the leader Lease (or not surely)")
        if term is not None and not token.same_term(term):
            raise FenceClosed(
                f"the Lease changed hands since this replica recovered the stacks (term "
                f"{term.lease_transitions}, now {token.lease_transitions})"
            )
        return token

    def _expire(self) -> None:
        """Close the fence the moment the renew deadline passes without a renewal, even if
        the elector's own thread is stuck in a request. The token is taken under the lock
        it was read under, so a renewal that lands meanwhile is not closed by mistake."""
        while True:
            with self._cond:
                token = self._token
                if token is None:
                    self._cond.wait()
                    continue
                left = token.valid_until - self._clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._token = None
                self._publish(None)
            self._closed("no renewal of the Lease within the renew deadline")

    def _publish(self, valid_until: float | None) -> None:
        # Under the lock: the files change in the order the fence did.
        for file in self._files:
            try:
                file.publish(valid_until)
            except OSError as err:  # a reader of a stale or missing file refuses
                log.error("could not publish the fence to %s: %s", file.path, err)

    def _closed(self, why: str) -> None:
        log.warning("stack fence closed: %s", why)
        for callback in self._on_close:
            callback(why)


def changes_state(args: list[str]) -> bool:
    """Whether a CLI command line (as the SDK passes it) writes a stack's state or lock."""
    words = [a for a in args if not a.startswith("-")][:2]
    return tuple(words[:1]) in STATE_CHANGING_COMMANDS or tuple(words) in (STATE_CHANGING_COMMANDS)


class FencedCommand(auto.PulumiCommand):
    """The Pulumi CLI, each process in a session (process group) of its own, refused while
    the fence is closed for a command that changes a stack, and killed with its group when
    the fence closes.

    The SDK's own `PulumiCommand.run` starts the CLI in the controller's process group,
    where it can be killed only one pid at a time and its plugins outlive it; this `run`
    does what the SDK's does (non-interactive, output streamed line by line to the
    callbacks, `CommandError` on a non-zero exit) with the process in its own group.
    """

    def __init__(self, root: str, fence: Fence) -> None:
        super().__init__(root=root)
        self._fence = fence
        self._guard = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()
        fence.on_close(self._fence_closed)

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: auto.OnOutput | None = None,
        on_error: auto.OnOutput | None = None,
    ) -> auto.CommandResult:
        args = list(args)
        end = args.index("--") if "--" in args else len(args)
        if "--non-interactive" not in args[:end]:
            args.insert(0, "--non-interactive")  # fail rather than prompt
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        if os.path.isabs(self.command):  # plugins beside the CLI are found first
            env["PATH"] = os.pathsep.join([os.path.dirname(self.command), env.get("PATH", "")])
        with self._guard:
            if changes_state(args):
                self._fence.check()
            process = subprocess.Popen(
                [self.command, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                encoding="utf-8",
                start_new_session=True,
            )
            self._running.add(process)
        out: list[str] = []
        err: list[str] = []
        try:
            readers = [
                threading.Thread(target=_lines, args=(process.stdout, on_output, out)),
                threading.Thread(target=_lines, args=(process.stderr, on_error, err)),
            ]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            code = process.wait()
        finally:
            with self._guard:
                self._running.discard(process)
        result = auto.CommandResult(stdout="\n".join(out), stderr="\n".join(err), code=code)
        if code != 0:
            raise create_command_error(result)
        return result

    def running_pids(self) -> list[int]:
        with self._guard:
            return sorted(p.pid for p in self._running)

    def _fence_closed(self, why: str) -> None:
        del why  # logged by the fence
        self.kill_all()

    def kill_all(self) -> int:
        """SIGKILL every running CLI's process group; how many were killed."""
        with self._guard:
            running = list(self._running)
        for process in running:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue  # ended meanwhile
            log.warning("killed the Pulumi CLI's process group %d (fence closed)", process.pid)
        return len(running)


def _lines(stream: object, callback: auto.OnOutput | None, chunks: list[str]) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        stripped = line.rstrip()
        if callback:
            callback(stripped)
        chunks.append(stripped)
    stream.close()  # type: ignore[attr-defined]
