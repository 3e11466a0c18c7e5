"""A supervised kill is a full crash: grandchildren in their own process group die too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devenv import processes
from devenv.processes import Supervised, descendants, free_port, python_env

# A child that starts a grandchild in a new session (as the Pulumi CLI starts its provider
# host in a group of its own), prints the grandchild's pid, then waits.
PARENT = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True)
print(g.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_reaches_a_grandchild_outside_the_process_group(tmp_path: Path) -> None:
    log = tmp_path / "parent.log"
    child = Supervised("parent", [sys.executable, "-c", PARENT], log)
    deadline = time.monotonic() + 20
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[0])
    assert grandchild in descendants(child.pid)
    assert os.getpgid(grandchild) != os.getpgid(child.pid)

    child.kill()

    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_free_ports_are_bindable_distinct_and_below_the_ephemeral_range() -> None:
    """Below the range outgoing connections draw from, no connection takes one between the
    pick and the server's bind; and one process never gets the same port twice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < low for port in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("0.0.0.0", port))


def test_two_processes_never_get_the_same_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the suite's workers picks ports at once; a bind test cannot see a port the
    other has picked and not bound yet. Over 1,000 ports, 200 each, two processes without a
    shared claim would meet on about 40 (each an 'address already in use' at a server's
    start); with it, on none."""
    claims, span = tmp_path / "claims", (15000, 15999)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import devenv.processes as p, pathlib, sys\n"
            f"p._CLAIMS = pathlib.Path({str(claims)!r})\n"
            f"p._pick_range = lambda: {span!r}\n"
            "print(' '.join(str(p.free_port()) for _ in range(200)))",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=python_env(),
    )
    theirs = {int(port) for port in child.stdout.split()}
    monkeypatch.setattr(processes, "_CLAIMS", claims)
    monkeypatch.setattr(processes, "_pick_range", lambda: span)
    mine = {free_port() for _ in range(200)}
    assert len(theirs) == len(mine) == 200
    assert not theirs & mine, sorted(theirs & mine)
