"""The documented uninstall's first step, `atomic-gang drain`, on the embedded default.

A gang Job still running on a Satisfied pool and a keep-warm pool whose Job finished: the
drain stops our ClusterQueue (Kueue evicts the running gang), deletes both pools, and the
running controller releases them through their finalizers. It ends with 0 live instances
of the cluster in EC2, no stack in the state backend (as the operator's `pulumi stack ls`
lists them) and no GangNodePool, so no finalizer either.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.commands import cli
from tests.e2e.conftest import GNP, KUEUE, eventually, phase, submit
from tests.support.ec2_listing import described_instances

LIVE = ["pending", "running", "stopping", "stopped"]


def live_instances(env: Any) -> list[str]:
    filters = [
        {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [env.cluster_name]},
        {"Name": "instance-state-name", "Values": LIVE},
    ]
    return [i["InstanceId"] for i in described_instances(env.ec2_client(), filters)]


def stacks(env: Any, pulumi_tool: Any, cwd: Path) -> list[str]:
    """Every stack in the backend, as an operator's `pulumi stack ls --all` lists it."""
    out = subprocess.run(
        [str(pulumi_tool.binary), "stack", "ls", "--all", "--json"],
        env={**os.environ, **env.pulumi_env, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [str(s["name"]).rsplit("/", 1)[-1] for s in json.loads(out or "[]")]


def test_drain_leaves_no_instance_no_stack_and_no_finalizer(
    gang_local: Any,
    namespace: str,
    pulumi_tool: Any,
    tmp_path: Path,
    capsys: Any,
) -> None:
    env = gang_local()
    api = env.control_plane.api_client()
    custom = k8s.CustomObjectsApi(api)
    suffix = uuid.uuid4().hex[:6]
    running, warm = f"run-{suffix}", f"warm-{suffix}"

    # The first Job finishes in seconds: its pool is kept warm, its instances running.
    submit(env, namespace, "warm-job", warm)
    eventually(lambda: phase(env, warm) == Phase.KEEP_WARM, 180, "pool KeepWarm")
    # The second runs for an hour: its pool is Satisfied under a running gang.
    env.jobs.run_seconds = env.pods.run_seconds = 3600.0
    submit(env, namespace, "long-job", running)
    eventually(lambda: phase(env, running) == Phase.SATISFIED, 120, "running pool Satisfied")
    batch = k8s.BatchV1Api(api)
    eventually(
        lambda: not batch.read_namespaced_job("long-job", namespace).spec.suspend,
        what="the long Job running",
    )
    eventually(lambda: len(live_instances(env)) == 4, 30, "4 instances live")
    eventually(
        lambda: {running, warm} <= set(stacks(env, pulumi_tool, tmp_path)), 60, "both stacks"
    )

    argv = [
        "drain",
        "--kubeconfig",
        str(env.kubeconfig_path()),
        "--pulumi-root",
        str(pulumi_tool.binary.parent.parent),
        "--timeout",
        "240",
        "--poll",
        "1",
        "--config",
        str(env.settings_path),
    ]
    try:
        code = cli.main(argv)
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"stopped ClusterQueue(s) {ko.CLUSTER_QUEUE_NAME}" in out
        assert f"deleted GangNodePool {running}" in out and f"deleted GangNodePool {warm}" in out

        # Kueue evicted the running gang (its Job suspended) before its nodes went.
        assert batch.read_namespaced_job("long-job", namespace).spec.suspend is True
        assert live_instances(env) == []
        assert stacks(env, pulumi_tool, tmp_path) == []
        assert custom.list_cluster_custom_object(*GNP)["items"] == []
        queue = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", ko.CLUSTER_QUEUE_NAME)
        assert queue["spec"]["stopPolicy"] == "HoldAndDrain"
    finally:
        # The session's ClusterQueue serves the next tests: `--resume` opens it again.
        assert cli.main([*argv, "--resume"]) == 0
    queue = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", ko.CLUSTER_QUEUE_NAME)
    assert queue["spec"].get("stopPolicy", "None") == "None"
