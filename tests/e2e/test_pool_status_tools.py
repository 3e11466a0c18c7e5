"""The pool's status as a user's tools read it, through a real kubectl of the apiserver's own
release: `kubectl wait --for=condition=Ready gnp/<pool>` returns when the gang is whole, with
the generation it answers, and `kubectl get gnp -o wide` names the claim and the last error.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.e2e.conftest import eventually, pool, submit

N = 2


@pytest.fixture(scope="session")
def kubectl(tools: Any) -> Path:
    return Path(tools["kubectl"].binary)


def run_kubectl(kubectl: Path, env: Any, *args: str, timeout: float = 60) -> str:
    argv = [str(kubectl), f"--kubeconfig={env.control_plane.info.kubeconfig}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
    return done.stdout


def test_kubectl_wait_for_ready_returns_when_the_gang_is_whole(
    gang_local: Any, namespace: str, kubectl: Path
) -> None:
    # Nodes join 4 s after launch and the Job runs long enough to keep the pool Satisfied
    # while the test reads it.
    env = gang_local(join_delay=4.0, job_run_seconds=120.0)
    name = f"st-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "wait", name, count=str(N))
    eventually(lambda: pool(env, name) is not None, 60, "the pool created")
    waiting = subprocess.Popen(
        [
            str(kubectl),
            f"--kubeconfig={env.control_plane.info.kubeconfig}",
            "wait",
            "--for=condition=Ready",
            f"gnp/{name}",
            "--timeout=240s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The wait began before the gang was whole (it has to wait, not just read).
        started = (pool(env, name) or {}).get("status") or {}
        assert started.get("phase") != Phase.SATISFIED, started
        out, err = waiting.communicate(timeout=300)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert out.strip() == f"{c.GNP_SINGULAR}.{c.GROUP}/{name} condition met"

    got = pool(env, name)
    assert got is not None
    status = got["status"]
    assert status["phase"] == Phase.SATISFIED, status
    assert status["readyNodes"] == N and len(status["instanceIds"]) == N, status
    ready = {x["type"]: x for x in status["conditions"]}["Ready"]
    generation = got["metadata"]["generation"]
    assert (ready["status"], ready["reason"]) == ("True", "Satisfied"), ready
    assert ready["observedGeneration"] == generation == status["observedGeneration"], got

    # -o wide: the claim (the Workload's namespace and name) and no last error.
    header, row = run_kubectl(kubectl, env, "get", f"gnp/{name}", "-o", "wide").splitlines()
    for column in ("PHASE", "READY", "CLAIM NAMESPACE", "CLAIM", "RESERVATION", "LAST ERROR"):
        assert column in header, header
    claim = got["spec"]["claim"]
    assert row.split()[:3] == [name, Phase.SATISFIED, str(N)], row
    assert claim["namespace"] in row.split() and claim["name"] in row.split(), row
