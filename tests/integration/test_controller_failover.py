"""Two controller processes, one Lease: the leader is killed mid-acquisition and the
standby finishes the same acquisition without launching a second set."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.controller_process import start_controller, write_settings
from devenv.processes import Supervised
from provisioner.api import constants as c
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually

LEASE = "atomic-gang-failover"


def _settings_file(path: Path, env: GangEnv, state_dir: Path) -> Path:
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
    }
    return write_settings(path, settings)


@pytest.fixture
def replicas(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> Iterator[tuple[GangEnv, dict[str, Supervised]]]:
    # The harness's in-process controller is not started: only the two processes run.
    env: GangEnv = gang_env_factory(join_delay=3600.0, start_controller=False)
    children: dict[str, Supervised] = {}
    for name in ("replica-a", "replica-b"):
        config = _settings_file(tmp_path / f"{name}.yaml", env, tmp_path / name / "pulumi")
        children[name] = start_controller(
            name,
            tmp_path / f"{name}.log",
            kubeconfig=control_plane.info.kubeconfig,
            pulumi_root=pulumi_tool.binary.parent.parent,
            config=config,
            passphrase="integration",
        )
    yield env, children
    for child in children.values():
        child.stop()


def _holder(env: GangEnv) -> str | None:
    coordination = k8s.CoordinationV1Api(env.custom.api_client)
    try:
        lease = coordination.read_namespaced_lease(LEASE, env.namespace)
    except k8s.ApiException:
        return None
    return lease.spec.holder_identity or None


def test_standby_takes_over_and_finishes_without_a_second_launch(
    replicas: tuple[GangEnv, dict[str, Supervised]],
) -> None:
    env, children = replicas
    leader = eventually(lambda: _holder(env), 60, "a leader")
    standby = next(name for name in children if name != leader)

    workload = env.submit("failover", "pool-failover", count=2)
    joining = env.wait_phase("pool-failover", c.PHASE_JOINING, timeout=120)
    launched = set(joining["status"]["instanceIds"])
    assert len(launched) == 2

    children[leader].kill()  # SIGKILL the whole process group, as a node failure would
    assert not children[leader].alive()
    eventually(
        lambda: _holder(env) == standby, 60, lambda: f"{standby} to lead (now {_holder(env)})"
    )

    env.nodes.join_delay = 0.2  # the in-flight set now joins
    env.wait_check(workload, c.CHECK_READY, timeout=120)
    pool = env.pool("pool-failover")
    assert pool is not None and set(pool["status"]["instanceIds"]) == launched
    assert env.launches() == 2, "the standby launched a second set"
    assert {i["InstanceId"] for i in env.live_instances()} == launched
    log = children[standby].log_path.read_text()
    assert "leading" in log

    # Only S3 is shared: the stack the standby finishes is the one the dead leader began,
    # and the release through the finalizer leaves no instance and no stack.
    def recorded() -> bool:
        outputs = env.driver.read_outputs("pool-failover")
        return outputs is not None and set(outputs.instance_ids) == launched

    eventually(recorded, 120, "the standby to record the set in the shared stack")
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, "pool-failover")
    eventually(lambda: env.pool("pool-failover") is None, 120, "the pool released and removed")
    assert env.live_instances() == []
    assert env.driver.list_stacks() == []


__all__ = ["signal", "subprocess"]
