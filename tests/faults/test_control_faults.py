"""Control-plane faults: a Pulumi lock left behind by a dead process, apiserver write
conflicts, and an apiserver that goes away and comes back.

The controller runs in-process (the harness's `Manager` with the real engine, driver and
Kubernetes client). For the restart, its Kubernetes client reaches the shared apiserver
through the TCP proxy of `tests/integration/conftest_kube.py`, which the test cuts and
restores: to the controller that is an apiserver restart (connections reset, new ones
refused, then back), while the apiserver other tests share is never touched. Each test ends
with nothing lost (the gang Ready on exactly N) and nothing billing that should not.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.assembly import build_system
from provisioner.controllers.manager import Manager
from provisioner.kube.client import KubeClient
from provisioner.pulumi_driver.driver import StackDriver
from tests.chaos.harness import assert_clean, detached_enis, status
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

N = 2


@pytest.fixture
def managers() -> Iterator[list[Manager]]:
    """Controllers a test starts itself; requested before `gang_env_factory`, so they are
    stopped after its teardown has released the pools through their finalizers."""
    started: list[Manager] = []
    yield started
    for manager in started:
        manager.stop()


def start_manager(env: GangEnv, kube: KubeClient, pulumi_root: Path) -> Manager:
    """A controller like the harness's, on `kube`, with a fresh engine and stack driver."""
    manager = build_system(
        env.settings,
        kube,
        pulumi_root,
        identity=f"fault-{uuid.uuid4().hex[:6]}",
        aws_max_attempts=1,
    ).manager
    manager.start(serve_http=False)
    return manager


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_pulumi_lock_left_by_a_dead_process_is_cleared_and_release_completes(
    managers: list[Manager],
    gang_env_factory: Any,
    control_plane: Any,
    pulumi_tool: Any,
) -> None:
    env: GangEnv = gang_env_factory(file_backend=True)  # writes the lock file itself
    workload = env.submit("locked", "pool-locked", count=N, **{c.ANN_KEEP_WARM_TTL: "1s"})
    env.wait_check(workload, c.CheckState.READY, timeout=150)
    eventually(lambda: env.driver.outputs("pool-locked"), 60, "the stack to record the set")
    env.manager.stop()

    # What a controller killed during `pulumi up` leaves in a file backend.
    settings = env.settings
    lock_dir = (
        Path(settings.pulumi.state_dir)
        / ".pulumi"
        / "locks"
        / "organization"
        / settings.pulumi.project_name
        / "pool-locked"
    )
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_dir / f"{uuid.uuid4()}.json"
    lock.write_text(
        json.dumps(
            {
                "pid": dead_pid(),
                "username": getpass.getuser(),
                "hostname": socket.gethostname(),
                "timestamp": datetime.now(UTC).isoformat(),
            }
        )
    )

    kube = KubeClient.from_kubeconfig(control_plane.info.kubeconfig)
    managers.append(start_manager(env, kube, pulumi_tool.binary.parent.parent))
    # The release removes the set from the stack (an `up`): it could not run while the lock
    # stood. The prepared stack itself stays for the next claim.
    env.kueue.finish(env.namespace, workload)
    env.wait_phase("pool-locked", Phase.IDLE, timeout=150)
    # A fresh driver: the harness's own caches what its stopped controller last saw.
    reader = StackDriver(env.settings, pulumi_tool.binary.parent.parent, logging.getLogger("t"))

    def set_removed() -> bool:
        outputs = reader.read_outputs("pool-locked")
        return outputs is not None and outputs.instance_ids == ()

    eventually(set_removed, 60, "the set removed from the kept stack")
    assert not lock.exists(), "the stale lock is still there"
    assert env.live_instances() == []


class CoWriter:
    """Another writer that bumps the pool's resourceVersion (an annotation of its own) every
    `period` seconds, so the controller's writes, preconditioned on the version they read,
    lose races."""

    def __init__(self, env: GangEnv, pool: str, period: float) -> None:
        self.env, self.pool, self.period = env, pool, period
        self.bumps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.env.custom.patch_cluster_custom_object(
                    c.GROUP,
                    c.VERSION,
                    c.GNP_PLURAL,
                    self.pool,
                    {"metadata": {"annotations": {"test.example.com/bump": str(self.bumps)}}},
                )
                self.bumps += 1
            except k8s.ApiException:
                pass
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def conflicts(caplog: pytest.LogCaptureFixture, pool: str) -> int:
    return sum(1 for r in caplog.records if f"{pool}: conflict" in r.getMessage())


def test_apiserver_conflicts_are_requeued_never_overwritten(
    gang_env_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.kube.workqueue")
    # Conflicts on saving an action's result are absorbed there (and logged), not requeued.
    caplog.set_level(logging.INFO, logger="provisioner.controllers.pool.reconciler")
    env: GangEnv = gang_env_factory(join_delay=2.0)
    enis = detached_enis(env)
    # The launch is held 1.5 s inside EC2, so the co-writer below certainly moves the pool
    # between the launch marker's write and the write of the launch's result: the race this
    # test is about does not depend on how fast this machine runs a pass.
    # The in-process controller signs with the process's default credentials.
    controller_key = os.environ["AWS_ACCESS_KEY_ID"]
    env.emulator.client.delay_calls("RunInstances", 1.5, client=controller_key)
    workload = env.submit("conflict", "pool-conflict", count=N)
    eventually(lambda: env.pool("pool-conflict"), 60, "the pool to exist")

    # A burst of ten writes a second while the pool prepares its stack and launches.
    writer = CoWriter(env, "pool-conflict", 0.1)
    try:
        env.wait_phase("pool-conflict", Phase.JOINING, timeout=120)
    finally:
        writer.stop()
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    held = [x for x in env.emulator.client.consumed() if x.get("action") == "RunInstances"]
    assert [x.get("by") for x in held] == [controller_key], held
    assert conflicts(caplog, "pool-conflict"), f"{writer.bumps} writes caused no conflict"
    pool = env.pool("pool-conflict")
    assert pool is not None
    # The other writer's field survived: the controller never wrote the object blindly.
    assert pool["metadata"]["annotations"]["test.example.com/bump"] == str(writer.bumps - 1)
    assert env.launches() == N
    assert_clean(env, {"pool-conflict": N}, enis)


def test_a_steady_co_writer_does_not_stall_a_joining_pool(
    gang_env_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.kube.workqueue")
    env: GangEnv = gang_env_factory(join_delay=2.0)
    workload = env.submit("steady", "pool-steady", count=N)
    eventually(lambda: env.pool("pool-steady"), 60, "the pool to exist")
    writer = CoWriter(env, "pool-steady", 1.0)  # one write a second, for as long as it takes
    try:
        env.wait_check(workload, c.CheckState.READY, timeout=75)
    finally:
        writer.stop()


def test_an_apiserver_restart_mid_acquisition_loses_nothing(
    managers: list[Manager], gang_env_factory: Any, flaky_kube_client: Any, pulumi_tool: Any
) -> None:
    env: GangEnv = gang_env_factory(join_delay=2.0, start_controller=False)
    enis = detached_enis(env)
    managers.append(start_manager(env, flaky_kube_client.client, pulumi_tool.binary.parent.parent))
    workload = env.submit("restart", "pool-restart", count=N)

    eventually(
        lambda: status(env, "pool-restart").get("phase") in (Phase.ACQUIRING, Phase.JOINING),
        120,
        "the pool to start acquiring",
        every=0.05,
    )
    flaky_kube_client.proxy.outage()
    time.sleep(8)  # longer than a watch reconnect backoff and a status write's timeout
    flaky_kube_client.proxy.restore()
    env.wait_check(workload, c.CheckState.READY, timeout=180)

    time.sleep(5)  # one more round of the outage's restart: a second outage while Satisfied
    flaky_kube_client.proxy.outage()
    time.sleep(4)
    flaky_kube_client.proxy.restore()
    time.sleep(5)
    assert env.check(workload)["state"] == c.CheckState.READY  # type: ignore[index]
    assert env.launches() == N, "the restart led to a second launch"
    assert_clean(env, {"pool-restart": N}, enis)
