"""The pod simulator's placement (`devenv.podsim`) binds a gang Pod only where the scheduler
could: a Ready, schedulable Node matching its nodeSelector and required node affinity, whose
blocking taints it tolerates, whose allocatable holds its requests, and with no other gang
Pod. And the Job simulator makes an Indexed Job's Pods as the Job controller does."""

from __future__ import annotations

from typing import Any

from devenv import jobsim, node_match, podsim
from provisioner.api import constants as c

POOL = "pool-a"
TAINT = {"key": c.GANG_TAINT_KEY, "value": POOL, "effect": "NoSchedule"}
TOLERATION = {"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": POOL, "effect": "NoSchedule"}


def node(name: str, *, pool: str = POOL, ready: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {c.POOL_LABEL: pool, c.GROUP_LABEL: "g1"}},
        "spec": {"taints": extra.get("taints", [TAINT]), "unschedulable": extra.get("cordon")},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }


def pod(selector: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "nodeSelector": {c.POOL_LABEL: POOL} if selector is None else selector,
            "tolerations": [TOLERATION],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            **spec,
        },
    }


def test_a_pod_whose_node_selector_no_node_matches_is_not_placed() -> None:
    nodes = [node("n1"), node("n2", pool="pool-b", taints=[{**TAINT, "value": "pool-b"}])]
    assert podsim.choose_node(pod({c.POOL_LABEL: "pool-z"}), nodes, set()) is None
    # Pinned to a pool that has a free Node it tolerates, it is placed, on that Node only.
    b_pod = pod({c.POOL_LABEL: "pool-b"}, tolerations=[{**TOLERATION, "value": "pool-b"}])
    assert podsim.choose_node(b_pod, nodes, set()) == "n2"


def test_every_label_of_the_node_selector_must_match() -> None:
    selector = {c.POOL_LABEL: POOL, c.GROUP_LABEL: "g2"}
    assert podsim.choose_node(pod(selector), [node("n1")], set()) is None
    selector[c.GROUP_LABEL] = "g1"
    assert podsim.choose_node(pod(selector), [node("n1")], set()) == "n1"


def test_one_gang_pod_per_node_and_only_ready_schedulable_nodes() -> None:
    nodes = [node("n1"), node("n2", ready=False), node("n3", cordon=True), node("n4")]
    assert podsim.choose_node(pod(), nodes, set()) == "n1"
    assert podsim.choose_node(pod(), nodes, {"n1"}) == "n4"
    assert podsim.choose_node(pod(), nodes, {"n1", "n4"}) is None


def test_a_blocking_taint_must_be_tolerated() -> None:
    untolerating = pod(tolerations=[])
    assert podsim.choose_node(untolerating, [node("n1")], set()) is None
    prefer = node("n1", taints=[{**TAINT, "effect": "PreferNoSchedule"}])
    assert podsim.choose_node(untolerating, [prefer], set()) == "n1"
    assert node_match.tolerates([{"operator": "Exists"}], TAINT)
    assert node_match.tolerates([{"key": c.GANG_TAINT_KEY, "operator": "Exists"}], TAINT)
    assert not node_match.tolerates([{**TOLERATION, "value": "pool-b"}], TAINT)
    assert not node_match.tolerates([{**TOLERATION, "effect": "NoExecute"}], TAINT)


def test_required_node_affinity_and_requests_are_honoured() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": c.GROUP_LABEL, "operator": "In", "values": ["g9"]}
                        ]
                    }
                ]
            }
        }
    }
    assert podsim.choose_node(pod(affinity=affinity), [node("n1")], set()) is None
    big = pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "8"}}}])
    assert podsim.choose_node(big, [node("n1")], set()) is None
    gpu = pod(containers=[{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}])
    assert podsim.choose_node(gpu, [node("n1")], set()) is None


def test_only_pods_with_a_pool_node_selector_are_gang_pods() -> None:
    assert podsim.is_gang_pod(pod())
    assert not podsim.is_gang_pod(pod({"kubernetes.io/os": "linux"}))


def test_an_indexed_jobs_pod_carries_its_index_and_hostname_and_its_owner() -> None:
    job = {
        "metadata": {"name": "train", "namespace": "ns", "uid": "job-uid"},
        "spec": {
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/job-name": "train"}},
                "spec": {"containers": [{"name": "c"}], "nodeSelector": {c.POOL_LABEL: POOL}},
            },
        },
    }
    made = jobsim._pod_for(job, 2)
    assert made["metadata"]["name"].startswith("train-2-")
    assert made["metadata"]["annotations"][jobsim.COMPLETION_INDEX] == "2"
    assert made["metadata"]["labels"][jobsim.COMPLETION_INDEX] == "2"
    assert made["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
    assert made["spec"]["hostname"] == "train-2"
    (owner,) = made["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", "job-uid", True)
    assert podsim.is_gang_pod(made) and jobsim._is_gang_job(job)
    assert jobsim._index_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
