"""With the real apiserver, Kueue and the chart's webhook as the embedded default registers
it: only a pool's own pods run on its nodes, and a controller reference proves nothing by
itself.

Namespace A's gang makes a pool and holds its two nodes. A Pod of namespace B that
tolerates every taint and selects the pool (by its label, or by a node's name) is refused
by the pod webhook, naming the pool and its namespace; the same Pod in A is allowed, and
so are a DaemonSet's pod (its DaemonSet exists) and any pod of kube-system (never sent).
A pod borrowing a DaemonSet reference with the wrong uid is refused. A gang Job naming a
JobSet that does not exist in its ownerReferences is judged like any Job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from tests.e2e.conftest import check_state, eventually, submit, workload_of

POD_HOOK = "validate-pod.atomic-gang.k8s.aws"
JOB_HOOK = "validate-job.atomic-gang.k8s.aws"
EVERYTHING = [{"operator": "Exists"}]


@pytest.fixture
def other_namespace(kube_api: Any) -> Iterator[str]:
    core = k8s.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _pod(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    containers = [{"name": "c", "image": "registry.example/agent:1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {"containers": containers, **spec},
    }


def _on_node(node: str) -> dict[str, Any]:
    # What the DaemonSet controller writes on each of its pods.
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}  # fmt: skip


def _refused(create: Any) -> dict[str, Any]:
    with pytest.raises(k8s.ApiException) as err:
        create()
    return dict(json.loads(err.value.body))


def test_only_the_pools_own_pods_run_on_its_nodes(
    gang_local: Any, namespace: str, other_namespace: str, kube_api: Any
) -> None:
    env = gang_local(job_run_seconds=600.0)  # A's gang holds its nodes for the whole test
    assert env.webhook is not None and env.webhook.config is not None
    assert [h["name"] for h in env.webhook.config["webhooks"]] == [JOB_HOOK, POD_HOOK]
    core = k8s.CoreV1Api(kube_api)
    pool_name = f"pa-{uuid.uuid4().hex[:6]}"
    submit(env, namespace, "owner", pool_name)
    eventually(
        lambda: check_state(workload_of(env, namespace, "owner")) == c.CheckState.READY,
        120,
        "namespace A's gang Ready",
    )
    nodes = core.list_node(label_selector=f"{c.POOL_LABEL}={pool_name}").items
    assert len(nodes) == 2
    node = nodes[0].metadata.name
    by_label = {"tolerations": EVERYTHING, "nodeSelector": {c.POOL_LABEL: pool_name}}
    by_name = {"tolerations": EVERYTHING, "affinity": _on_node(node)}

    # Namespace B: refused, by the pool's label and by a node's name.
    for spec in (by_label, by_name, {"nodeName": node}):
        status = _refused(
            lambda spec=spec: core.create_namespaced_pod(other_namespace, _pod("intruder", spec))
        )
        assert status["code"] == 403, status
        message = status["message"]
        assert message.startswith(f'admission webhook "{POD_HOOK}" denied the request')
        assert f"would run on the nodes of pool {pool_name}" in message
        assert f"belongs to namespace {namespace}" in message
        assert "tenancy.sharedPools" in message
    assert core.list_namespaced_pod(other_namespace).items == []

    # Namespace A, the pool's own: allowed (a dry run: nothing to schedule afterwards).
    own = core.create_namespaced_pod(namespace, _pod("own", by_label), dry_run="All")
    assert own.metadata.name == "own"
    # kube-system is never sent to the webhook.
    system = core.create_namespaced_pod("kube-system", _pod("agent", by_label), dry_run="All")
    assert system.metadata.name == "agent"
    # An ordinary pod of B is never sent either.
    plain = core.create_namespaced_pod(other_namespace, _pod("plain", {}), dry_run="All")
    assert plain.metadata.name == "plain"

    # A DaemonSet of B: its pod pinned to a gang node passes; a borrowed reference does not.
    daemonset = k8s.AppsV1Api(kube_api).create_namespaced_daemon_set(
        other_namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "node-agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "node-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "node-agent"}},
                    "spec": {
                        "tolerations": EVERYTHING,
                        "containers": [{"name": "c", "image": "registry.example/agent:1"}],
                    },
                },
            },
        },
    )
    ref = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "node-agent",
        "uid": daemonset.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    agent = _pod("node-agent-x1", by_name, labels={"app": "node-agent"}, ownerReferences=[ref])
    made = core.create_namespaced_pod(other_namespace, agent, dry_run="All")
    assert made.metadata.name == "node-agent-x1"
    forged = _pod("node-agent-x2", by_name, ownerReferences=[{**ref, "uid": str(uuid.uuid4())}])
    status = _refused(lambda: core.create_namespaced_pod(other_namespace, forged))
    assert f"would run on the nodes of pool {pool_name}" in status["message"]


def test_a_job_naming_a_foreign_jobset_is_judged_like_any_job(
    gang_local: Any, namespace: str, kube_api: Any
) -> None:
    gang_local()
    batch = k8s.BatchV1Api(kube_api)
    # A JobSet of this namespace (no queue, nothing runs it here): Kueue's own Job webhook
    # refuses a Job whose controller JobSet does not exist by name, so the foreign one
    # below is named after this one and differs only in its uid.
    jobset = k8s.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets",
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
         "metadata": {"name": "decoy"},
         "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "replicas": 1, "template": {
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "registry.example/trainer:1"}]}}}}}]}},
    )  # fmt: skip
    # A gang Job without a queue: refused on its own.
    body = ko.gang_job(namespace, "child", ko.QUEUE_NAME, "pool-f", 2)
    del body["metadata"]["labels"][c.QUEUE_NAME_LABEL]
    alone = _refused(lambda: batch.create_namespaced_job(namespace, body, dry_run="All"))
    assert alone["message"].startswith(f'admission webhook "{JOB_HOOK}" denied the request')
    assert c.QUEUE_NAME_LABEL in alone["message"]
    # Naming as its controller a JobSet that is not the one here (another uid: another
    # namespace's, or one deleted and made again) changes nothing.
    ref = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "decoy",
           "uid": str(uuid.uuid4()), "controller": True}  # fmt: skip
    body["metadata"]["ownerReferences"] = [ref]
    named = _refused(lambda: batch.create_namespaced_job(namespace, body, dry_run="All"))
    assert named["message"] == alone["message"]
    # Nothing of ours was made (a JobSet controller, where one runs, makes the decoy's own
    # suspended child Job; that one is not ours).
    assert "child" not in {j.metadata.name for j in batch.list_namespaced_job(namespace).items}
    # The JobSet's own child (its uid) is left to the JobSet's verdict.
    body["metadata"]["ownerReferences"] = [{**ref, "uid": jobset["metadata"]["uid"]}]
    child = batch.create_namespaced_job(namespace, body, dry_run="All")
    assert child.metadata.name == "child"
