"""Two controller processes, one Lease, separate state directories (as the chart runs them),
one S3 backend: the leader is SIGKILLed while its launch call is in flight, the killed
replica comes back as the standby, and the new leader is SIGKILLed in turn while the pool
is Joining. The replica left finishes the acquisition from the stack the dead leader wrote,
with one launched set per generation, and the release leaves nothing.

Where each kill landed is read again from the pool's status once the killed process is gone
(its state frozen), so a kill that missed its window fails the test instead of passing it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.controller_process import EMULATOR_KEYS, start_controller, write_settings
from devenv.processes import Supervised
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually

LEASE = "atomic-gang-failover"
POOL = "pool-failover"
N = 2
# The leader's RunInstances is held this long before EC2 runs it: the window the first kill
# aims at (launch marker persisted, call in flight, no IDs yet), as a slow EC2 answer would.
SLOW_LAUNCH_SECONDS = 3.0


def _settings_file(path: Path, env: GangEnv, state_dir: Path, **extra: Any) -> Path:
    """A replica's settings file; `extra` adds the settings a test needs beside these."""
    settings = {
        "clusterName": CLUSTER,
        "defaults": {
            "region": REGION,
            "nodeRoleArn": env.settings.defaults.node_role_arn,
            "keepWarmTTL": "10m",
        },
        "joinDeadlineSeconds": 600,
        "reapIntervalSeconds": 5,
        "leaderElection": {
            "enabled": True,
            "leaseNamespace": env.namespace,
            "leaseName": LEASE,
            "leaseDuration": "4s",
            "renewDeadline": "3s",
            "retryPeriod": "1s",
        },
        # The harness's backend (the emulator's S3 bucket and KMS key, or its file backend).
        # Each replica has its own disk, as the chart runs them: only the backend is shared.
        "pulumi": {**env.settings.pulumi.model_dump(mode="json"), "state_dir": str(state_dir)},
        "aws": {"endpointUrl": env.emulator.endpoint_url},
        "webhook": {"enabled": False},
        **extra,
    }
    return write_settings(path, settings)


class Replicas:
    """The two controller processes; a killed one can be started again under a new identity."""

    def __init__(
        self,
        env: GangEnv,
        control_plane: Any,
        pulumi_tool: Any,
        tmp_path: Path,
        **extra_settings: Any,
    ):
        self.env, self._control_plane, self._pulumi_tool = env, control_plane, pulumi_tool
        self._tmp = tmp_path
        self._extra = extra_settings
        self.children: dict[str, Supervised] = {}
        self._starts = 0

    def start(self, name: str) -> Supervised:
        # Each replica keeps its own disk, kept across its restarts as a pod's emptyDir is not:
        # only the S3 backend is shared, so nothing can be read from a neighbour's files.
        self._starts += 1
        config = _settings_file(
            self._tmp / f"{name}.yaml", self.env, self._tmp / name / "pulumi", **self._extra
        )
        self.children[name] = start_controller(
            name,
            self._tmp / f"{name}-{self._starts}.log",
            kubeconfig=self._control_plane.info.kubeconfig,
            pulumi_root=self._pulumi_tool.binary.parent.parent,
            config=config,
            passphrase="integration",
            identity=f"{name}-{self._starts}",
        )
        return self.children[name]

    def name_of(self, identity: str | None) -> str | None:
        return None if identity is None else identity.rsplit("-", 1)[0]

    def stop(self) -> None:
        for child in self.children.values():
            child.stop()


@pytest.fixture
def replicas(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> Iterator[Replicas]:
    # The harness's in-process controller is not started: only the processes run.
    env: GangEnv = gang_env_factory(join_delay=3600.0, start_controller=False)
    both = Replicas(env, control_plane, pulumi_tool, tmp_path)
    for name in ("replica-a", "replica-b"):
        both.start(name)
    yield both
    both.stop()


def _holder(env: GangEnv) -> str | None:
    coordination = k8s.CoordinationV1Api(env.custom.api_client)
    try:
        lease = coordination.read_namespaced_lease(LEASE, env.namespace)
    except k8s.ApiException:
        return None
    return lease.spec.holder_identity or None


def _status(env: GangEnv) -> dict[str, Any]:
    return (env.pool(POOL) or {}).get("status") or {}


def _launching(env: GangEnv) -> bool:
    """The launch window: its marker persisted, the call in flight, no IDs yet."""
    st = _status(env)
    return st.get("launchInProgress") is not None and not st.get("instanceIds")


def _leader(replicas: Replicas, other_than: str | None = None) -> str:
    """The replica holding the Lease (waiting for one other than `other_than`)."""
    env = replicas.env

    def found() -> str | None:
        name = replicas.name_of(_holder(env))
        return name if name and name != other_than and replicas.children[name].alive() else None

    return str(eventually(found, 60, lambda: f"a leader other than {other_than}"))


def test_leader_killed_mid_launch_and_again_while_joining_finishes_with_one_set(
    replicas: Replicas,
) -> None:
    env = replicas.env
    emu = env.emulator.client
    first = _leader(replicas)
    # Only the controllers' launch call (signed with their key) is held.
    emu.delay_calls("RunInstances", SLOW_LAUNCH_SECONDS, client=EMULATOR_KEYS["AWS_ACCESS_KEY_ID"])
    workload = env.submit("failover", POOL, count=N)

    # Kill 1: while the leader's launch is in flight.
    # The marker is saved just before the call leaves: on a loaded machine the call can
    # still be on its way, so the kill waits until the emulator holds it.
    eventually(
        lambda: _launching(env) and bool(emu.consumed()), 180, "the leader's launch in flight"
    )
    replicas.children[first].kill()
    frozen = _status(env)
    assert frozen.get("launchInProgress") and not frozen.get("instanceIds"), (
        f"the first kill missed the launch window: {frozen}"
    )
    token = frozen["launchInProgress"]["clientToken"]
    assert [x["switch"] for x in emu.consumed()] == ["delay"], "no launch call was in flight"
    second = _leader(replicas, other_than=first)
    replicas.start(first)  # back, as the standby

    # Kill 2: the new leader, while the pool is Joining, once it has recorded the set.
    joining = env.wait_phase(POOL, Phase.JOINING, timeout=120)
    launched = set(joining["status"]["instanceIds"])
    group = joining["status"]["activeGroup"]
    assert len(launched) == N
    eventually(
        lambda: _status(env).get("recordedGroup") == group,
        120,
        "the new leader to record the set in the shared stack",
    )
    replicas.children[second].kill()
    frozen = _status(env)
    assert frozen["phase"] == Phase.JOINING, f"the second kill missed Joining: {frozen}"
    assert set(frozen["instanceIds"]) == launched
    # The stack in S3 is the dead leader's: it names the set it launched.
    written = env.driver.read_outputs(POOL)
    assert written is not None and set(written.instance_ids) == launched, written
    last = _leader(replicas, other_than=second)
    assert last == first

    env.nodes.join_delay = 0.2  # the set now joins
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    st = _status(env)
    assert st["phase"] == Phase.SATISFIED and set(st["instanceIds"]) == launched, st
    assert st.get("recordedGroup") == group, "the last replica recorded again"
    # One launched set per generation: every launch request (the dead leader's and the
    # resumed one) carried the one token of the generation the first leader marked
    # ({token}), and together they launched exactly the N instances.
    requests = emu.launch_requests("RunInstances")
    tokens = {r["params"].get("ClientToken") for r in requests}
    assert tokens == {token}, (token, requests)
    assert {i for r in requests for i in r["instance_ids"] or ()} == launched
    assert env.launches() == N, "a second set was launched"
    assert {i["InstanceId"] for i in env.live_instances()} == launched

    # The release goes through the stack the dead leader wrote: no instance, no stack left.
    env.kueue.finish(env.namespace, workload)
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, POOL)
    eventually(lambda: env.pool(POOL) is None, 120, "the pool released and removed")
    assert env.live_instances() == []
    assert env.driver.list_stacks() == []
    templates = env.ec2.describe_launch_templates()["LaunchTemplates"]
    assert [t["LaunchTemplateName"] for t in templates if POOL in t["LaunchTemplateName"]] == []
