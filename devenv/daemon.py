"""`python -m devenv up | status | down`: the local environment as a background process.

`up` starts this module's `serve` in a new session (the whole embedded default: control
plane, Kueue, EC2 emulator, node and Job simulators, the controller and the bootstrap's
Kueue objects), waits until it has written its state file, and prints the kubeconfig and
how to use it; `down` signals it and waits until every
child is gone; `status` reads the state file and checks that the processes answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from devenv.processes import python_env

STATE_FILE = "state.json"
DEFAULT_WORK_DIR = Path(".devenv")


def _state_path(work_dir: Path) -> Path:
    return work_dir / STATE_FILE


def serve(work_dir: Path) -> int:
    """Run the environment in this process until SIGTERM or SIGINT."""
    from devenv.environment import LocalEnvironment

    # The controller runs in this process: its log, like ours, goes to daemon.log.
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    env = LocalEnvironment(work_dir=work_dir.resolve())
    try:
        state = env.start()
        _state_path(work_dir).write_text(json.dumps(state, indent=2))
        stop.wait()
    finally:
        env.stop()
        with contextlib.suppress(FileNotFoundError):
            _state_path(work_dir).unlink()
    return 0


def up(work_dir: Path, timeout: float = 1200) -> int:
    existing = read_state(work_dir)
    if existing and _alive(existing["pid"]):
        print(f"already running (pid {existing['pid']}); `make dev-down` stops it")
        _print_usage(existing)
        return 0
    work_dir.mkdir(parents=True, exist_ok=True)
    log = (work_dir / "daemon.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "devenv.daemon", "serve", str(work_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=python_env(),
    )
    print(f"starting the local environment (pid {proc.pid}); log: {work_dir / 'daemon.log'}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(work_dir)
        if state:
            _print_usage(state)
            return 0
        if proc.poll() is not None:
            print(
                f"error: the environment exited with {proc.returncode}; "
                f"see {work_dir / 'daemon.log'}"
            )
            return 1
        time.sleep(0.5)
    print("error: the environment did not start in time")
    return 1


def down(work_dir: Path) -> int:
    state = read_state(work_dir)
    if not state:
        print("not running")
        return 0
    pid = int(state["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        if not _alive(pid):
            print("stopped")
            return 0
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    print("stopped (forced)")
    return 0


def status(work_dir: Path) -> int:
    state = read_state(work_dir)
    if not state or not _alive(state["pid"]):
        print("not running; start it with `atomic-gang dev up`")
        return 1
    checks = {
        "environment process": _alive(state["pid"]),
        "EC2 emulator": _answers(state["ec2Endpoint"] + "/_emulator/state"),
    }
    if state.get("controllerHealth"):
        checks["controller"] = _answers(state["controllerHealth"])
    print(json.dumps(state, indent=2))
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


def read_state(work_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(_state_path(work_dir).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data


def _print_usage(state: dict[str, Any]) -> None:
    print(f"apiserver:   {state['apiserver']}")
    print(f"kubeconfig:  {state['kubeconfig']}")
    print(f"EC2 endpoint: {state['ec2Endpoint']}")
    print(f"use it:      export KUBECONFIG={state['kubeconfig']}")
    print("             kubectl get nodes,gnp; kubectl get workloads,jobs -A")
    print(f"             submit Jobs to the LocalQueue {state.get('localQueue')}")
    print("             atomic-gang doctor; atomic-gang explain NAMESPACE/JOB")


def _alive(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        raise SystemExit(serve(Path(sys.argv[2])))
    raise SystemExit("usage: python -m devenv.daemon serve WORK_DIR")
