"""An informer that keeps only what its model reads (`Informer(keep=read_by(...))`).

The controller caches every pool's Nodes and every queued Job; an EKS Node's images,
addresses and nodeInfo, and a Job's pod template, are most of each and never read. Kept
as the model reads them, each body parses to the same model (so label writes, which diff
the model against `fields_read`, write the same), is keyed and indexed the same, and a
body the model cannot read is kept whole for its reader to fail on, as before.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from provisioner.api.nodes import Node
from provisioner.api.owners import GangOwner
from provisioner.kube.cache import TypedCache, read_by
from provisioner.kube.client import ObjectList
from provisioner.kube.informer import Informer, label_index
from tests.unit.test_kube_informer import FakeListWatch, Script, event, run

POOL = "gang-nodes.example/pool"


def eks_node(name: str, rv: str, *, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Node as the kubelet on an EKS GPU instance writes it (abridged, same shape)."""
    spec: dict[str, Any] = {"providerID": f"aws:///us-east-1a/i-0{name}"}
    if taints is not None:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": rv,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-12-06T10:00:00Z",
            "labels": {POOL: "p", "node.kubernetes.io/instance-type": "p5.48xlarge"},
            "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.1.7"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.1.7"}] * 4,
            "allocatable": {"cpu": "191450m", "memory": "2047Gi", "nvidia.com/gpu": "8"},
            "capacity": {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if kind == "Ready" else "False",
                    "reason": f"Kubelet{kind}",
                    "message": "kubelet is posting ready status " * 3,
                    "lastHeartbeatTime": "2026-12-06T10:05:00Z",
                    "lastTransitionTime": "2026-12-06T10:01:00Z",
                }
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {"names": [f"registry.example/image-{i}@sha256:{'a' * 64}"], "sizeBytes": i}
                for i in range(40)
            ],
            "nodeInfo": {"kernelVersion": "6.1.0", "kubeletVersion": "v1.34.1"},
        },
    }


def queued_job(name: str, rv: str) -> dict[str, Any]:
    """A Job Kueue queues: its pod template is most of it; the controller reads metadata."""
    container = {
        "name": "trainer",
        "image": "registry.example/trainer:1",
        "command": ["torchrun", "--nnodes=4"] + [f"--arg{i}" for i in range(30)],
        "resources": {"limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}},
        "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(30)],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "resourceVersion": rv,
            "uid": f"uid-{name}",
            "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
            "annotations": {"gang-nodes.example/instance-type": "p5.48xlarge"},
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "suspend": True,
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        },
        "status": {},
    }


def size(body: dict[str, Any]) -> int:
    return len(json.dumps(body))


def test_a_node_is_kept_as_its_model_reads_it_and_parses_the_same() -> None:
    keep = read_by(Node.from_dict)
    for body in (
        eks_node("a", "1"),
        eks_node("b", "2", taints=[]),
        eks_node(
            "c",
            "3",
            taints=[{"key": "gang-nodes.example/pool", "value": "p", "effect": "NoSchedule"}],
        ),
    ):
        whole = copy.deepcopy(body)
        kept = keep(body)
        assert Node.from_dict(kept) == Node.from_dict(whole)
        # A label write diffs the model against this: it must be what the whole body gives.
        assert Node.from_dict(kept).fields_read() == Node.from_dict(whole).fields_read()
        assert "images" not in kept["status"] and "addresses" not in kept["status"]
        assert size(kept) * 4 < size(whole), (size(kept), size(whole))
    # None and [] stay apart: a write from a Node without taints never carries `taints: []`.
    assert "taints" not in keep(eks_node("d", "4"))["spec"]
    assert keep(eks_node("e", "5", taints=[]))["spec"]["taints"] == []


def test_a_job_is_kept_as_its_owner_model_reads_it() -> None:
    whole = queued_job("train", "7")
    kept = read_by(GangOwner.from_dict)(copy.deepcopy(whole))
    assert set(kept) == {"apiVersion", "kind", "metadata"}
    assert GangOwner.from_dict(kept) == GangOwner.from_dict(whole)
    assert GangOwner.from_dict(kept).owner_kind is not None
    assert size(kept) * 3 < size(whole), (size(kept), size(whole))


def test_a_body_the_model_cannot_read_is_kept_whole_for_its_reader_to_fail_on() -> None:
    broken = eks_node("a", "1")
    broken["spec"]["taints"] = [{"key": "k"}]  # no effect: not a Taint
    assert read_by(Node.from_dict)(copy.deepcopy(broken)) == broken


def test_an_informer_keeps_listed_and_watched_bodies_as_the_model_reads_them(
    informers: list[Informer],
) -> None:
    moved = eks_node("b", "5")
    moved["metadata"]["labels"][POOL] = "q"
    source = FakeListWatch(
        [ObjectList([eks_node("a", "1")], "2")],
        [Script(event("ADDED", eks_node("b", "3")), event("MODIFIED", moved))],
    )
    informer, recorder = run(source, index=label_index(POOL), keep=read_by(Node.from_dict))
    informers.append(informer)
    assert recorder.seen == [("add", "a", "1"), ("add", "b", "3"), ("update", "b", "5")]
    assert [n["metadata"]["name"] for n in informer.list_indexed("q")] == ["b"]
    for name in ("a", "b"):
        cached = informer.get("", name)
        assert cached is not None
        assert "images" not in cached["status"] and "managedFields" not in cached["metadata"]
    typed = TypedCache(informer, Node.from_dict)
    node = typed.get("", "b")
    assert node is not None and node.ready and node.instance_id == "i-0b"
    assert node.status.allocatable == {"cpu": "191450m", "memory": "2047Gi", "nvidia.com/gpu": "8"}


def test_an_informer_without_keep_caches_the_whole_body(informers: list[Informer]) -> None:
    source = FakeListWatch([ObjectList([eks_node("a", "1")], "2")], [])
    informer, _ = run(source)
    informers.append(informer)
    cached = informer.get("", "a")
    assert cached is not None and len(cached["status"]["images"]) == 40


def test_a_model_that_fails_in_another_way_still_leaves_the_body_to_its_reader() -> None:
    def parse_failing(body: dict[str, Any]) -> Node:
        raise TypeError("a validator's own bug")

    body = eks_node("a", "1")
    assert read_by(parse_failing)(copy.deepcopy(body)) == body
