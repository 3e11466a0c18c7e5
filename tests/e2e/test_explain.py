"""`atomic-gang explain` on the real parts: a Job held on a capacity shortfall, then admitted.

The emulator has no room for the Job's instance type, so Kueue reserves quota and our check
stays Pending while the pool retries at $0; explain must say so, with the pool's phase and
the shortfalls so far. Once capacity is freed it says the Job runs.
"""

from __future__ import annotations

import uuid
from typing import Any

from provisioner.api import constants as c
from provisioner.commands.explain import explain
from provisioner.kube.client import KubeClient
from tests.e2e.conftest import conditions, eventually, pool, submit, workload_of

SCARCE = "c5.xlarge"


def test_explain_names_the_pending_check_and_the_shortfalls(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local()
    ec2 = env.ec2_client()
    zones = sorted({s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]})
    for zone in zones:
        env.emulator_client.set_capacity(zone, SCARCE, 0)
    kube = KubeClient.from_kubeconfig(env.control_plane.info.kubeconfig)
    pool_name = f"ex-{uuid.uuid4().hex[:6]}"

    assert explain(kube, namespace, "held") == [
        f"Job, JobSet, PyTorchJob, TrainJob or MPIJob {namespace}/held does not exist."
    ]
    submit(env, namespace, "held", pool_name, **{c.ANN_INSTANCE_TYPE: SCARCE})
    eventually(
        lambda: (
            int(
                ((pool(env, pool_name) or {}).get("status") or {}).get("consecutiveShortfalls") or 0
            )
            >= 1
        ),
        what="a shortfall",
    )
    lines = explain(kube, namespace, "held")
    text = "\n".join(lines)
    assert lines[0].startswith(f"Job {namespace}/held has quota and waits on our check: Pending")
    assert f"Pool {pool_name}: phase Acquiring, 0 of 2 instances" in text
    assert "Capacity shortfalls so far:" in text and "($0)" in text
    assert "none." not in text

    env.emulator_client.set_capacity(zones[0], SCARCE, 2)
    eventually(
        lambda: conditions(workload_of(env, namespace, "held")).get("Admitted") == "True",
        120,
        "admitted after capacity freed",
    )
    eventually(
        lambda: (
            "is admitted and running" in explain(kube, namespace, "held")[0]
            or "has completed" in explain(kube, namespace, "held")[0]
        ),
        what="explain saying it runs",
    )
