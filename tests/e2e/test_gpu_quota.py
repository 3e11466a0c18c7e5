"""With the real Kueue manager: a Job asking for GPUs and EFA devices is admitted on the
default queues, which cover both (as the bootstrap and the chart do by default).

The instance type stays a small one: this is about Kueue's quota, not the hardware; the
pool and the check run as for any gang.
"""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from tests.e2e.conftest import check_state, conditions, eventually, workload_of


def test_a_gpu_job_is_admitted_with_the_default_queues(gang_local: Any, namespace: str) -> None:
    env = gang_local(join_delay=0.5)
    pool_name = f"gpu-{uuid.uuid4().hex[:6]}"
    # A GPU type with EFA: pods asking 8 GPUs and 4 EFA interfaces of an m5.large are
    # refused at apply (they could never be scheduled there).
    gpu_type = {c.ANN_INSTANCE_TYPE: "p4d.24xlarge", c.ANN_EFA: "true"}
    job = ko.gang_job(namespace, "gpu", ko.QUEUE_NAME, pool_name, 2, gpu_type)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"] = {c.RESOURCE_GPU: "8", c.RESOURCE_EFA: "4"}
    k8s.BatchV1Api(env.control_plane.api_client()).create_namespaced_job(namespace, job)

    reserved = eventually(
        lambda: (
            (wl := workload_of(env, namespace, "gpu"))
            and conditions(wl).get(c.WL_QUOTA_RESERVED) == "True"
            and wl
        ),
        what="Kueue reserving GPU and EFA quota",
    )
    usage = {
        name
        for assignment in reserved["status"]["admission"]["podSetAssignments"]
        for name in assignment.get("resourceUsage") or {}
    }
    assert {c.RESOURCE_GPU, c.RESOURCE_EFA} <= usage
    eventually(
        lambda: check_state(workload_of(env, namespace, "gpu")) == c.CheckState.READY,
        120,
        "our check Ready",
    )
    eventually(
        lambda: conditions(workload_of(env, namespace, "gpu")).get(c.WL_ADMITTED) == "True",
        what="Workload admitted",
    )
