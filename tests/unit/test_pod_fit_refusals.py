"""A gang whose pods cannot fit one node of its instance type is refused at apply (the
webhook) and at its Workload (the decision, for a cluster whose webhook is off), with the
same sentence naming the resource, the request and what the type offers.

EC2's figures are the fake's (moto's DescribeInstanceTypes answers): p4d.24xlarge has 8
NVIDIA GPUs, 96 vCPUs and 1152 GiB; m5.large 2 vCPUs and 8 GiB, of which the EKS AL2023
AMI keeps 674 MiB back (kube-reserved 11 MiB x 29 pods + 255 MiB, eviction 100 MiB).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.pod_fit import REASON_POD_DOES_NOT_FIT
from provisioner.api.settings import Settings
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import (
    PoolChange,
    WorkloadInputs,
    decide,
)
from provisioner.controllers.workload.fit import InstanceTypeAnswer
from provisioner.webhook.review import review
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_instance_types import KNOWN, FakeInstanceTypes
from tests.support.jobs import job as job_body
from tests.support.pools import claim, pool_lookup, pool_spec
from tests.support.pools import pool as pool_body
from tests.support.workloads import check, condition
from tests.support.workloads import workload as wl_body

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
CHECK = "atomic-gang-check"
SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
    }
)
LABELS = {c.POOL_LABEL: "pretrain", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}

GPUS_16 = {"limits": {"nvidia.com/gpu": "16"}}
MEMORY_200GI = {"requests": {"cpu": "1", "memory": "200Gi"}}

# (instance type, one container's resources, what the refusal must name)
REFUSED = [
    pytest.param(
        "p4d.24xlarge",
        GPUS_16,
        ("nvidia.com/gpu: 16", "p4d.24xlarge node offers 8", "8 NVIDIA GPUs"),
        id="16-gpus-on-p4d",
    ),
    pytest.param(
        "m5.large",
        MEMORY_200GI,
        ("memory: 200Gi", "m5.large node offers 7518Mi", "8192 MiB less the 674 MiB"),
        id="200Gi-on-m5.large",
    ),
]
FITTING = [
    pytest.param("p4d.24xlarge", {"limits": {"nvidia.com/gpu": "8"}}, id="8-gpus-on-p4d"),
    pytest.param("m5.large", {"requests": {"cpu": "1", "memory": "7Gi"}}, id="7Gi-on-m5.large"),
]


def annotations(instance_type: str) -> dict[str, str]:
    return {c.ANN_COUNT: "2", c.ANN_INSTANCE_TYPE: instance_type}


def gang_job(instance_type: str, resources: dict[str, Any]) -> dict[str, Any]:
    body = job_body(
        "trainer",
        namespace="default",
        uid=None,
        labels=LABELS,
        annotations=annotations(instance_type),
        parallelism=2,
        completions=2,
    )
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return body


def webhook_answer(obj: dict[str, Any], types: FakeInstanceTypes) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": "CREATE",
            "object": obj,
        },
    }
    out = review(body, SETTINGS, pools=pool_lookup(), instance_types=types)
    return dict(out["response"])


def workload_of(resources: dict[str, Any], *, check_state: str = c.CheckState.PENDING) -> Workload:
    """Kueue's Workload for `gang_job`: its pod set carries the Job's pod template."""
    template = {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}
    return Workload.model_validate(
        wl_body(
            uid="uid-1",
            resource_version="7",
            count=2,
            owner=job_body(),
            template=template,
            conditions=[condition(c.WL_QUOTA_RESERVED, "True", reason="R")],
            checks=[check(CHECK, check_state)],
        )
    )


def decision_inputs(
    wl: Workload, instance_type: str, pool: GangNodePool | None = None
) -> WorkloadInputs:
    return WorkloadInputs(
        workload=wl,
        check_name=CHECK,
        owner_labels=LABELS,
        owner_annotations=annotations(instance_type),
        pool=pool,
        claimant_exists=True,
        settings=SETTINGS,
        now=NOW,
        instance_type=InstanceTypeAnswer(instance_type, figures=KNOWN[instance_type]),
    )


@pytest.mark.parametrize(("instance_type", "resources", "says"), REFUSED)
def test_the_webhook_refuses_pods_that_cannot_fit_the_type(
    instance_type: str, resources: dict[str, Any], says: tuple[str, ...]
) -> None:
    verdict = webhook_answer(gang_job(instance_type, resources), FakeInstanceTypes())
    assert verdict["allowed"] is False
    message = verdict["status"]["message"]
    for phrase in (f"{c.ANN_INSTANCE_TYPE} is", *says):
        assert phrase in message
    (cause,) = verdict["status"]["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{c.ANN_INSTANCE_TYPE}]"


@pytest.mark.parametrize(("instance_type", "resources"), FITTING)
def test_the_webhook_allows_pods_that_fit(instance_type: str, resources: dict[str, Any]) -> None:
    types = FakeInstanceTypes()
    assert webhook_answer(gang_job(instance_type, resources), types)["allowed"] is True
    assert types.asked == [instance_type]


def test_the_webhook_lets_a_gang_through_when_ec2_does_not_answer() -> None:
    # The Workload path asks EC2 again, and launches nothing before it has the answer.
    types = FakeInstanceTypes(failing="RequestLimitExceeded")
    assert webhook_answer(gang_job("p4d.24xlarge", GPUS_16), types)["allowed"] is True


def test_the_webhook_refuses_a_type_ec2_does_not_know() -> None:
    verdict = webhook_answer(gang_job("p9x.48xlarge", GPUS_16), FakeInstanceTypes())
    assert verdict["allowed"] is False
    assert "EC2 knows no such instance type in us-east-1" in verdict["status"]["message"]


@pytest.mark.parametrize(("instance_type", "resources", "says"), REFUSED)
def test_the_workload_is_rejected_with_the_webhooks_sentence(
    instance_type: str, resources: dict[str, Any], says: tuple[str, ...]
) -> None:
    decision = decide(decision_inputs(workload_of(resources), instance_type))
    assert decision.pool_change is PoolChange.NONE  # nothing is created, nothing launched
    assert decision.check is not None
    assert decision.check.state == c.CheckState.REJECTED
    assert decision.check.reason == REASON_POD_DOES_NOT_FIT
    webhook = webhook_answer(gang_job(instance_type, resources), FakeInstanceTypes())
    assert decision.check.message == webhook["status"]["message"]
    for phrase in says:
        assert phrase in decision.check.message


def test_a_claimant_whose_pods_cannot_fit_releases_its_claim() -> None:
    held = GangNodePool.model_validate(
        pool_body(
            "pretrain",
            spec=pool_spec(
                pool="pretrain",
                count=2,
                claim=claim(name="job-train-abc", uid="uid-1"),
                owner_namespace="ml",
            ),
        )
    )
    decision = decide(decision_inputs(workload_of(GPUS_16), "p4d.24xlarge", held))
    assert decision.pool_change is PoolChange.RELEASE
    assert decision.check is not None and decision.check.state == c.CheckState.REJECTED


@pytest.mark.parametrize(("instance_type", "resources"), FITTING)
def test_a_fitting_gang_creates_its_pool_with_its_pod_requests(
    instance_type: str, resources: dict[str, Any]
) -> None:
    decision = decide(decision_inputs(workload_of(resources), instance_type))
    assert decision.pool_change is PoolChange.CREATE
    wanted = {**resources.get("limits", {}), **resources.get("requests", {})}
    assert decision.pod_requests == wanted


def test_a_new_claim_waits_while_ec2_does_not_describe_the_type() -> None:
    answer = InstanceTypeAnswer("p4d.24xlarge", error="RequestLimitExceeded")
    inputs = decision_inputs(workload_of(GPUS_16), "p4d.24xlarge")
    decision = decide(replace(inputs, instance_type=answer))
    assert decision.pool_change is PoolChange.NONE
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING
    assert "RequestLimitExceeded" in decision.check.message
    assert decision.retry_after


def test_the_claimants_progress_names_nodes_ready_but_not_usable() -> None:
    joining = GangNodePool.model_validate(
        pool_body(
            "pretrain",
            spec=pool_spec(
                pool="pretrain",
                count=2,
                claim=claim(name="job-train-abc", uid="uid-1"),
                owner_namespace="ml",
            ),
            status={
                "phase": "Joining",
                "activeGroup": "gen-1",
                "instanceIds": ["i-00000000000000001", "i-00000000000000002"],
                "readyNodes": 1,
                "unusableNodes": [
                    {
                        "node": "node-2",
                        "instanceId": "i-00000000000000002",
                        "missing": ["nvidia.com/gpu: 0 of 8 allocatable"],
                    }
                ],
            },
        )
    )
    wl = workload_of({"limits": {"nvidia.com/gpu": "8"}})
    decision = decide(decision_inputs(wl, "p4d.24xlarge", joining))
    assert decision.check is not None and decision.check.state == c.CheckState.PENDING
    assert "1/2 nodes joined, Ready and usable" in decision.check.message
    assert "node-2 lacks nvidia.com/gpu: 0 of 8 allocatable" in decision.check.message
