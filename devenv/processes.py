"""Child processes of the local environment, and the promise that none outlives it.

Every service the environment starts (etcd, kube-apiserver, the Kueue manager, the EC2
emulator, the controller) goes through `Supervised`. Each child gets its own process group
so that a stop reaches its children too, its output goes to a log file, and an `atexit` hook
plus a SIGTERM handler stop whatever is still running when the Python process ends — a
failing test must not leave an apiserver bound to a port.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

_live: set[Supervised] = set()
_live_lock = threading.Lock()


REPO_ROOT = Path(__file__).resolve().parent.parent


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a `python -m devenv...` child, wherever it starts.

    The dev environment is not installed with the product (it stays out of the wheel), so
    a child finds it through PYTHONPATH rather than through site-packages.
    """
    env = {**os.environ, **(extra or {})}
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children, grandchildren, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 is the parent pid; the command name before it may hold spaces.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            found.append(child)
            frontier.append(child)
    return found


# Ports `free_port` handed out in this process: never the same one twice.
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
# Ports handed out by any process on this machine (the test suite's workers, a demo beside
# them), each for CLAIM_SECONDS: a bind test alone cannot see a port another process picked
# and has not bound yet.
_CLAIMS = Path(tempfile.gettempdir()) / "atomic-gang-free-ports"
CLAIM_SECONDS = 600.0
# Where `free_port` picks when the kernel's ephemeral range cannot be read (Linux's default
# starts at 32768).
_BELOW_EPHEMERAL = (20000, 32767)


def _pick_range() -> tuple[int, int]:
    """Ports below the kernel's ephemeral range, which outgoing connections draw from."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _BELOW_EPHEMERAL
    return (10000, low - 1) if low > 12000 else _BELOW_EPHEMERAL


@contextlib.contextmanager
def _machine_claims(path: Path) -> Iterator[dict[int, float]]:
    """The ports claimed on this machine in the last CLAIM_SECONDS, held under an exclusive
    lock on their file; what the caller adds is written back when it ends."""
    with open(path, "a+", encoding="ascii") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        handle.seek(0)
        now, claims = time.time(), {}
        for entry in handle.read().split():
            port, _, at = entry.partition("@")
            with contextlib.suppress(ValueError):
                if now - float(at) < CLAIM_SECONDS:
                    claims[int(port)] = float(at)
        yield claims
        handle.seek(0)
        handle.truncate()
        handle.write(" ".join(f"{port}@{at}" for port, at in claims.items()))


def free_port() -> int:
    """A TCP port, free on every interface a moment ago and claimed by no other process on
    this machine in the last ten minutes, for a server started next.

    Picked below the ephemeral range: a port the kernel hands out for `bind(0)` is one it
    also gives any process's outgoing connection, and with a test suite's hundreds of
    connections one took such a port between this check and the server's bind (uvicorn's
    "address already in use"). Below the range only another explicit bind can take it, and
    another worker of the suite picking the same port before either bound it did (the
    machine-wide claim).
    """
    low, high = _pick_range()
    with _HANDED_OUT_LOCK, _machine_claims(_CLAIMS) as claims:
        for _ in range(1000):
            port = low + int.from_bytes(os.urandom(2), "big") % (high - low + 1)
            if port in _HANDED_OUT or port in claims:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            claims[port] = time.time()
            return port
    raise RuntimeError(f"no free TCP port found in {low}-{high}")


class ProcessFailed(RuntimeError):
    """A supervised process exited or never became ready; the message holds its log tail."""


class Supervised:
    """One child process with a log file and a stop that leaves nothing behind."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        with _live_lock:
            _live.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def wait_ready(self, probe: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `probe` until it is true; fail fast if the process dies meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ProcessFailed(
                    f"{self.name} exited with {self.proc.returncode} before {what}.\n"
                    f"Log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(Exception):
                if probe():
                    return
            time.sleep(0.1)
        raise ProcessFailed(
            f"{self.name} did not become ready ({what}) within {timeout:.0f}s.\n"
            f"Log {self.log_path}:\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL the process and every descendant at once: a full crash (what the chaos
        tests do). The tree is read before the kill because children that start their own
        process group (the Pulumi CLI's provider host) would survive a group kill alone."""
        tree = descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._forget()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after `grace` seconds, the
        descendants that run in groups of their own (the Pulumi CLIs) included."""
        tree = descendants(self.proc.pid)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Grandchildren that ignored SIGTERM still share the group; those in groups of their
        # own were read before the stop (a dead parent's children are reparented).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._forget()

    def _forget(self) -> None:
        with contextlib.suppress(ValueError):
            self._log.close()
        with _live_lock:
            _live.discard(self)


def stop_all() -> None:
    """Stop every supervised process still running, newest first."""
    with _live_lock:
        remaining = sorted(_live, key=lambda s: s.proc.pid, reverse=True)
    for child in remaining:
        child.stop(grace=3.0)


atexit.register(stop_all)


def _on_sigterm(signum: int, frame: object) -> None:
    stop_all()
    raise SystemExit(128 + signum)


if threading.current_thread() is threading.main_thread():
    with contextlib.suppress(ValueError):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
