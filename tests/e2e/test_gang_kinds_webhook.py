"""A JobSet gang at `kubectl apply` and under `atomic-gang explain`, on the real apiserver
calling the chart's webhook, with the real Kueue and the real JobSet controller.

- A JobSet whose count is not its pods is refused at create, naming the number to use.
- A valid JobSet whose replicated job's template carries the pool label is created, and so
  are the Jobs the JobSet controller makes of it (they carry the pool label and no queue:
  the Job rules would refuse them on their own).
- `explain` on a JobSet held on a capacity shortfall names the pending check and the
  shortfall, and says it runs once capacity is freed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.commands.explain import explain
from provisioner.kube.client import KubeClient
from tests.e2e.conftest import eventually, pool

JOBSETS = ("jobset.x-k8s.io", "v1alpha2")
SCARCE = "c5.xlarge"


def jobset(
    namespace: str,
    name: str,
    pool_name: str,
    count: int,
    workers: int,
    *,
    instance_type: str = "m5.large",
    template_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A suspended JobSet of a leader (1 pod) and a workers replicated job (`workers` pods),
    the gang labelled on the JobSet."""

    def replicated(rj: str, pods: int) -> dict[str, Any]:
        container = {"name": rj, "image": "trainer", "resources": {"requests": {"cpu": "1"}}}
        job_spec = {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        }
        template: dict[str, Any] = {"spec": job_spec}
        if template_labels is not None:
            template["metadata"] = {"labels": dict(template_labels)}
        return {"name": rj, "replicas": 1, "template": template}

    return {
        "apiVersion": "/".join(JOBSETS),
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {c.QUEUE_NAME_LABEL: ko.QUEUE_NAME, c.POOL_LABEL: pool_name},
            "annotations": {c.ANN_COUNT: str(count), c.ANN_INSTANCE_TYPE: instance_type},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated("leader", 1), replicated("workers", workers)],
        },
    }


def _custom(env: LocalEnvironment) -> k8s.CustomObjectsApi:
    assert env.control_plane is not None
    return k8s.CustomObjectsApi(env.control_plane.api_client())


def test_a_jobset_whose_count_is_not_its_pods_is_refused_at_apply_with_the_number(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local(training_controllers=True)
    custom = _custom(env)
    wrong = jobset(namespace, "wrong-count", "pool-js", count=3, workers=3)
    with pytest.raises(k8s.ApiException) as err:
        custom.create_namespaced_custom_object(*JOBSETS, namespace, "jobsets", wrong)
    status = json.loads(err.value.body)
    assert status["code"] == 422, status
    assert status["message"].startswith('admission webhook "validate-job.atomic-gang.k8s.aws"')
    assert status["details"]["kind"] == "JobSet"
    (cause,) = status["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{c.ANN_COUNT}]"
    assert "Use 4 " in cause["message"], cause
    listed = custom.list_namespaced_custom_object(*JOBSETS, namespace, "jobsets")["items"]
    assert listed == []

    # The same JobSet with the count of its pods, the pool label also on a replicated job's
    # template: created, and the JobSet controller's Jobs (pool label, no queue) too.
    right = jobset(
        namespace,
        "right-count",
        "pool-js",
        count=4,
        workers=3,
        template_labels={c.POOL_LABEL: "pool-js"},
    )
    custom.create_namespaced_custom_object(*JOBSETS, namespace, "jobsets", right)
    batch = k8s.BatchV1Api(env.control_plane.api_client())  # type: ignore[union-attr]

    def children() -> list[Any]:
        return list(
            batch.list_namespaced_job(
                namespace, label_selector="jobset.sigs.k8s.io/jobset-name=right-count"
            ).items
        )

    eventually(lambda: len(children()) == 2, 60, "the JobSet controller's two Jobs")
    assert all(job.metadata.labels.get(c.POOL_LABEL) == "pool-js" for job in children())
    assert all(c.QUEUE_NAME_LABEL not in job.metadata.labels for job in children())


def test_explain_on_a_held_jobset_names_its_shortfall(
    gang_local: Callable[..., LocalEnvironment], namespace: str
) -> None:
    env = gang_local(training_controllers=True)
    ec2 = env.ec2_client()
    zones = sorted({s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]})
    for zone in zones:
        env.emulator_client.set_capacity(zone, SCARCE, 0)
    assert env.control_plane is not None
    kube = KubeClient.from_kubeconfig(env.control_plane.info.kubeconfig)
    pool_name = f"js-{uuid.uuid4().hex[:6]}"
    body = jobset(namespace, "held", pool_name, count=2, workers=1, instance_type=SCARCE)
    _custom(env).create_namespaced_custom_object(*JOBSETS, namespace, "jobsets", body)

    def shortfalls() -> int:
        status = (pool(env, pool_name) or {}).get("status") or {}
        return int(status.get("consecutiveShortfalls") or 0)

    eventually(lambda: shortfalls() >= 1, what="a shortfall")
    lines = explain(kube, namespace, "held")
    text = "\n".join(lines)
    assert lines[0].startswith(
        f"JobSet {namespace}/held has quota and waits on our check: Pending"
    ), text
    assert f"Pool {pool_name}: phase Acquiring, 0 of 2 instances" in text
    assert "Capacity shortfalls so far:" in text and "($0)" in text
    assert "none." not in text

    env.emulator_client.set_capacity(zones[0], SCARCE, 2)
    eventually(
        lambda: any(
            phrase in explain(kube, namespace, "held")[0]
            for phrase in ("is admitted and running", "has completed")
        ),
        120,
        "explain saying the JobSet runs",
    )
