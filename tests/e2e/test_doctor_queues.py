"""`atomic-gang doctor` with no --queue, against the real parts: it finds the LocalQueue a
GPU gang waits on by itself, although that is not the chart's default queue.

A second team's ClusterQueue lists our check but covers only cpu and memory, as a queue
copied from an older example does; the real Kueue manager refuses the GPU gang quota on it.
doctor, given only the kubeconfig, must fail naming that LocalQueue and nvidia.com/gpu, in
text and in its JSON document (`-o json`).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.commands import cli
from tests.e2e.conftest import eventually

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
LINE = re.compile(r"^(pass|FAIL|WARN)  ([^:]+): (.*)$")


def _gpu_gang_on_a_queue_without_gpu(env: LocalEnvironment, namespace: str) -> str:
    """A ClusterQueue listing our check that covers cpu and memory only, a LocalQueue on it,
    and a GPU gang Job waiting there until Kueue refuses it quota. Returns the queue."""
    api = env.control_plane.api_client()  # type: ignore[union-attr]
    custom = k8s.CustomObjectsApi(api)
    suffix = uuid.uuid4().hex[:6]
    cpu_and_memory = {r: ko.LOCAL_QUOTAS[r] for r in ("cpu", "memory")}
    cq = ko.cluster_queue(f"team-{suffix}", ko.FLAVOR_NAME, ko.CHECK_NAME, cpu_and_memory)
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", cq)
    lq = ko.local_queue(namespace, f"team-{suffix}", f"team-{suffix}")
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", lq)
    # On a GPU type: 8 GPUs of an m5.large would be refused at apply.
    gpu_type = {c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}
    job = ko.gang_job(namespace, f"gpu-{suffix}", f"team-{suffix}", f"gpu-{suffix}", 2, gpu_type)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"] = {c.RESOURCE_GPU: "8"}
    k8s.BatchV1Api(api).create_namespaced_job(namespace, job)
    eventually(
        lambda: any(
            x["type"] == c.WL_QUOTA_RESERVED and x["status"] == "False"
            for wl in custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
            if wl["spec"].get("queueName") == f"team-{suffix}"
            for x in (wl.get("status") or {}).get("conditions") or []
        ),
        what="Kueue refusing quota to the GPU gang",
    )
    return f"{namespace}/team-{suffix}"


def test_doctor_without_queue_fails_on_a_gpu_gang_on_a_queue_without_gpu_coverage(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = _gpu_gang_on_a_queue_without_gpu(healthy, namespace)
    kubeconfig = str(healthy.kubeconfig_path())

    code = cli.main(["doctor", "--kubeconfig", kubeconfig])

    out = capsys.readouterr().out.splitlines()
    failed = {m[2]: m[3] for line in out if (m := LINE.match(line)) is not None and m[1] == "FAIL"}
    assert code == 1, out
    line = f"ClusterQueue covers pending requests ({queue})"
    assert line in failed, out
    assert queue in failed[line] and c.RESOURCE_GPU in failed[line], failed[line]
    passed = [m[2] for line in out if (m := LINE.match(line)) and m[1] == "pass"]
    assert f"LocalQueue ({queue})" in passed and f"ClusterQueue lists our check ({queue})" in passed

    # The same run as one JSON document.
    code = cli.main(["doctor", "--kubeconfig", kubeconfig, "-o", "json"])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == 1
    checks = {check["name"]: check for check in document["checks"]}
    assert checks[line]["ok"] is False and c.RESOURCE_GPU in checks[line]["detail"]
    assert checks[line]["fix"]
    assert document["summary"]["failed"] >= 1

    # --queue narrows it to the queue given: the chart's default, which covers GPUs.
    code = cli.main(
        ["doctor", "--kubeconfig", kubeconfig, "--queue", f"{namespace}/{ko.QUEUE_NAME}"]
    )
    narrowed = capsys.readouterr().out
    assert queue not in narrowed
    assert "pass  ClusterQueue covers pending requests:" in narrowed, narrowed


def test_the_running_controller_reports_leadership_and_its_aws_calls(
    healthy: LocalEnvironment,
) -> None:
    # The composition root wires the AWS-call hook onto the engine's clients: the reaper's
    # and the instance index's listings are counted on the controller's own registry.
    assert healthy.manager is not None
    registry = healthy.manager.metrics.registry
    assert registry.get_sample_value("atomic_gang_leader") == 1
    eventually(
        lambda: (
            sum(
                sample.value
                for family in registry.collect()
                if family.name == "atomic_gang_aws_calls"
                for sample in family.samples
                if sample.name.endswith("_total")
                and sample.labels["service"] == "ec2"
                and sample.labels["action"] == "DescribeInstances"
                and sample.labels["error_code"] == "none"
            )
            > 0
        ),
        what="the controller's DescribeInstances calls counted",
    )
    assert registry.get_sample_value("process_resident_memory_bytes")
