"""A supervised kill is a full crash: grandchildren in their own process group die too."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from devenv.processes import Supervised, descendants

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
