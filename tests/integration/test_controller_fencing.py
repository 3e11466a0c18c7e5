"""A leader paused with SIGSTOP in the middle of a stack update, its Lease taken by the
standby, then resumed with SIGCONT: it writes nothing to the stack after it lost the Lease.

Two controller processes, one Lease, one S3 backend, as in `test_controller_failover`;
each replica signs with an access key of its own, so the emulator's S3 write log
(`/_emulator/s3-writes`) says which replica wrote each object, and when. The pause lands
while the leader's CLI is recording the launched set (its stack lock written, not yet
removed), checked from the write log once the process is stopped, so a pause that missed
its window fails the test.

Two ways to pause, both real: the controller's pid alone (a debugger, `kill -STOP <pid>`),
where its CLI child keeps running and its S3 writes reach the controller's fence and wait
there; and the whole pod (the cgroup freezer stops every process of it: the controller,
its CLI in its own process group, the provider host), where the CLI is stopped too and
goes on writing the moment it is resumed."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.controller_process import EMULATOR_KEYS, start_controller
from devenv.processes import Supervised, descendants
from provisioner.api import constants as c
from tests.integration.controller_harness import GangEnv, eventually
from tests.integration.test_controller_failover import LEASE, Replicas, _settings_file

POOL = "pool-fenced"
N = 2
# How long the resumed replica stays paused after the standby took over: long enough for
# the new leader to meet the stack's lock and for the paused CLI's next write to wait.
PAUSED_AFTER_TAKEOVER = 6.0
# How long the emulator holds each of the leader's S3 HEADs (see the test).
HEAD_HELD = 0.4


class KeyedReplicas(Replicas):
    """`Replicas` whose processes each sign with an access key naming the replica."""

    def start(self, name: str) -> Supervised:
        self._starts += 1
        config = _settings_file(self._tmp / f"{name}.yaml", self.env, self._tmp / name / "pulumi")
        self.children[name] = start_controller(
            name,
            self._tmp / f"{name}-{self._starts}.log",
            kubeconfig=self._control_plane.info.kubeconfig,
            pulumi_root=self._pulumi_tool.binary.parent.parent,
            config=config,
            passphrase="integration",
            identity=f"{name}-{self._starts}",
            env={**EMULATOR_KEYS, "AWS_ACCESS_KEY_ID": key_of(name)},
        )
        return self.children[name]


def key_of(name: str) -> str:
    return f"key-{name}"


@pytest.fixture
def replicas(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> Iterator[KeyedReplicas]:
    env: GangEnv = gang_env_factory(join_delay=3600.0, start_controller=False)
    both = KeyedReplicas(env, control_plane, pulumi_tool, tmp_path)
    for name in ("replica-a", "replica-b"):
        both.start(name)
    yield both
    for child in both.children.values():  # never leave a stopped process behind
        if child.alive():
            _signal_tree(child.pid, signal.SIGCONT)
    # A pool a failed run left must not be met by the next one (the harness then clears
    # its finalizer).
    with contextlib.suppress(k8s.ApiException):
        env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
    both.stop()


def _signal_tree(pid: int, signum: int) -> None:
    """``signum`` to ``pid`` and every descendant, as the cgroup freezer acts on a pod."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signum)


def _lease(env: GangEnv) -> Any:
    coordination = k8s.CoordinationV1Api(env.custom.api_client)
    return coordination.read_namespaced_lease(LEASE, env.namespace)


def _holder(env: GangEnv) -> str | None:
    try:
        return _lease(env).spec.holder_identity or None
    except k8s.ApiException:
        return None


def _leader(replicas: Replicas, other_than: str | None = None) -> str:
    def found() -> str | None:
        name = replicas.name_of(_holder(replicas.env))
        return name if name and name != other_than else None

    return str(eventually(found, 90, lambda: f"a leader other than {other_than}"))


def _status(env: GangEnv) -> dict[str, Any]:
    return (env.pool(POOL) or {}).get("status") or {}


def _lock_prefix(env: GangEnv) -> str:
    return f".pulumi/locks/organization/{env.settings.pulumi.project_name}/{POOL}/"


def _stack_writes(env: GangEnv, after: int) -> list[dict[str, Any]]:
    """The S3 writes to the pool's stack (its checkpoint, lock and history)."""
    project = env.settings.pulumi.project_name
    return [
        w
        for w in env.emulator.client.s3_writes(after)
        if f"/{project}/{POOL}" in f"/{w['key']}" or w["key"].startswith(_lock_prefix(env))
    ]


@pytest.mark.parametrize("paused", ["controller-pid", "whole-pod"])
def test_a_leader_paused_mid_update_writes_nothing_after_losing_its_lease(
    replicas: KeyedReplicas, paused: str
) -> None:
    env = replicas.env
    emu = env.emulator.client
    first = _leader(replicas)
    second = next(n for n in replicas.children if n != first)
    mark = max((w["seq"] for w in emu.s3_writes()), default=0)
    leader_key = key_of(first)
    # The record's update holds the stack's lock for about 0.3 s on its own: too short to
    # poll for and pause inside. Each of the leader's state-bucket HEADs (five in that
    # update, one before each checkpoint write among them) is held, so the lock is held
    # for two seconds or more; a read held changes nothing the fence decides.
    emu.delay_calls("HeadObject", HEAD_HELD, count=200, client=leader_key)
    workload = env.submit("fenced", POOL, count=N)

    def lock_writes() -> list[dict[str, Any]]:
        return [
            w
            for w in _stack_writes(env, mark)
            if w["requester"] == leader_key and w["key"].startswith(_lock_prefix(env))
        ]

    def recording() -> bool:
        """The gang launched (so the prepare's update is over) and the leader's CLI holds
        the stack's lock: the update that records the set is under way."""
        held = lock_writes()
        return bool(_status(env).get("instanceIds")) and bool(held) and held[-1]["method"] == "PUT"

    eventually(recording, 240, "the leader's CLI to lock the stack for the record")
    child = replicas.children[first]
    if paused == "whole-pod":
        _signal_tree(child.pid, signal.SIGSTOP)
    else:
        os.kill(child.pid, signal.SIGSTOP)
    stopped_at = time.time()
    # The window: the lock written and not yet removed, so the update was under way.
    locks = lock_writes()
    assert locks[-1]["method"] == "PUT", f"the pause missed the update: {locks}"
    launched = set(_status(env)["instanceIds"])
    assert len(launched) == N

    try:
        assert _leader(replicas, other_than=first) == second
        lease = _lease(env)
        taken_at: datetime = lease.spec.acquire_time
        assert lease.spec.holder_identity.startswith(second)
        time.sleep(PAUSED_AFTER_TAKEOVER)
    finally:
        _signal_tree(child.pid, signal.SIGCONT)

    # The new leader records the set itself once the paused one's CLI is gone.
    group = _status(env).get("activeGroup")
    assert group
    eventually(
        lambda: _status(env).get("recordedGroup") == group and _holder(env),
        240,
        "the new leader to record the set",
    )
    written = env.driver.read_outputs(POOL)
    assert written is not None and set(written.instance_ids) == launched, written
    assert {i["InstanceId"] for i in env.live_instances(POOL)} == launched
    assert env.launches() == N, "a second set was launched"
    assert replicas.name_of(_holder(env)) == second
    # The resumed replica sees it lost the Lease and leaves (the controller exits then, to
    # come back as a standby): by then whatever it had running has ended.
    eventually(lambda: not child.alive(), 90, "the deposed replica to exit")

    # No write from the paused replica after it lost the Lease: nothing it sent reached S3
    # after the standby took the Lease over (the emulator's clock and the Lease's are this
    # machine's).
    cutoff = taken_at.timestamp()
    late = [
        w for w in emu.s3_writes(mark) if w["requester"] == leader_key and w["received"] >= cutoff
    ]
    assert late == [], (
        f"the deposed leader wrote {len(late)} object(s) after {second} took the Lease "
        f"(paused at {stopped_at:.3f}, taken at {cutoff:.3f}): "
        + ", ".join(f"{w['method']} {w['key']} at {w['received']:.3f}" for w in late)
    )
    # The new leader wrote the stack.
    assert any(w["requester"] == key_of(second) for w in _stack_writes(env, mark))

    # What it had running was killed when its fence closed, not let finish.
    log = child.log_path.read_text(errors="replace")
    assert "stack fence closed" in log, log[-3000:]

    # The release goes through the stack as the new leader left it: nothing remains.
    env.kueue.finish(env.namespace, workload)
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
    eventually(lambda: env.pool(POOL) is None, 180, "the pool released and removed")
    assert env.live_instances() == []
    assert env.driver.list_stacks() == []
