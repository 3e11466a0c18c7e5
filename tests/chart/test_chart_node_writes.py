"""The chart narrows what the controller may write to Nodes, on the real kube-apiserver.

RBAC can grant `patch nodes` only for every field of every Node; the chart's
ValidatingAdmissionPolicy lets the controller's ServiceAccount change only the gang group
label, and only on a gang Node (one nodeadm labelled with the pool at join). The chart's
own ClusterRole, binding, policy and policy binding are applied to the session's apiserver;
the controller's ServiceAccount is impersonated. Its real label write (the pool
reconciler's `update_object` with the Node model) passes; every other change of a Node is
refused by the policy (not by RBAC: the refusals carry the policy's messages), and an
administrator is not held by it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import dynamic  # type: ignore[import-untyped]

from provisioner.api import constants as c
from provisioner.api.nodes import Node
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeForbidden
from provisioner.kube.resources import NODES
from provisioner.kube.status import update_object
from tests.chart.conftest import Helm

_APPLIED = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy")
_APPLIED_TOO = ("ValidatingAdmissionPolicyBinding",)


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"kept": "yes"}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{name[-8:]}"},
    }


@pytest.fixture
def controller(helm: Helm, kube_api: Any, namespace: str) -> Iterator[dict[str, Any]]:
    """The chart's RBAC and node-write policy, released in `namespace` under a name of its
    own (its cluster-scoped objects do not meet another test's); the controller's
    KubeClient, impersonating its ServiceAccount; a gang Node and a Node that is not one."""
    rendered = helm.render(
        {"fullnameOverride": f"nw-{namespace}", "webhook.certMode": "certManager"},
        namespace=namespace,
    )
    client = dynamic.DynamicClient(kube_api)
    applied = []
    main = f"nw-{namespace}"
    for obj in rendered.objects:
        if obj["kind"] in (*_APPLIED, *_APPLIED_TOO) and obj["metadata"]["name"] == (
            main if obj["kind"] in ("ClusterRole", "ClusterRoleBinding") else f"{main}-node-writes"
        ):
            api = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            api.server_side_apply(body=obj, field_manager="chart-node-writes-test")
            applied.append((api, obj["metadata"]["name"]))
    assert sorted(api.kind for api, _ in applied) == sorted((*_APPLIED, *_APPLIED_TOO))
    core = k8s.CoreV1Api(kube_api)
    gang, plain = f"gang-{namespace}", f"plain-{namespace}"
    core.create_node(_node(gang, {c.POOL_LABEL: "pool-a", "kubernetes.io/os": "linux"}))
    core.create_node(_node(plain, {"kubernetes.io/os": "linux"}))
    account = rendered.one("ServiceAccount")["metadata"]["name"]
    impersonating = k8s.ApiClient(configuration=kube_api.configuration)
    impersonating.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{namespace}:{account}"
    )
    yield {
        "kube": KubeClient(impersonating),
        "admin": KubeClient(kube_api),
        "gang": gang,
        "plain": plain,
        "core": k8s.CoreV1Api(impersonating),
    }
    for name in (gang, plain):
        core.delete_node(name)
    for api, name in applied:
        api.delete(name=name)


def _read(kube: KubeClient, name: str) -> Node:
    return Node.from_dict(kube.get(NODES, name))


def _patch(kube: KubeClient, name: str, patch: dict[str, Any]) -> None:
    node = kube.get(NODES, name)
    kube.patch(NODES, name, patch, resource_version=node["metadata"]["resourceVersion"])


def _wait_for_the_policy(core: k8s.CoreV1Api, name: str, timeout: float = 60) -> None:
    """The apiserver loads a new policy asynchronously: wait until a dry-run change it
    refuses is refused (a dry run changes nothing if it is not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.patch_node(name, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All")
        except k8s.ApiException as err:
            if err.status == 403 and "ValidatingAdmissionPolicy" in str(err.body):
                return
            raise
        assert time.monotonic() < deadline, "the node-write policy never took effect"
        time.sleep(0.5)


def test_the_controller_may_set_only_the_group_label_of_a_gang_node(
    controller: dict[str, Any],
) -> None:
    kube: KubeClient = controller["kube"]
    gang, plain = controller["gang"], controller["plain"]
    _wait_for_the_policy(controller["core"], gang)

    # The controller's own write, as the pool reconciler makes it: allowed.
    node = _read(kube, gang)
    update_object(kube, NODES, node, node.with_label(c.GROUP_LABEL, "gen-1"), c.FIELD_MANAGER)
    node = _read(kube, gang)
    assert node.labels[c.GROUP_LABEL] == "gen-1"
    update_object(kube, NODES, node, node.with_label(c.GROUP_LABEL, "gen-2"), c.FIELD_MANAGER)

    refusals: list[tuple[str, dict[str, Any], str]] = [
        (gang, {"metadata": {"labels": {"team": "vision"}}}, "no label of a Node but"),
        (gang, {"metadata": {"labels": {c.POOL_LABEL: "pool-b"}}}, "no label of a Node but"),
        (gang, {"metadata": {"labels": {"kubernetes.io/os": None}}}, "no label of a Node but"),
        (gang, {"metadata": {"annotations": {"kept": "no"}}}, "annotations"),
        (
            gang,
            {"spec": {"taints": [{"key": "x", "value": "y", "effect": "NoSchedule"}]}},
            "spec (taints",
        ),
        (gang, {"spec": {"unschedulable": True}}, "spec (taints"),
        (plain, {"metadata": {"labels": {c.GROUP_LABEL: "gen-1"}}}, "only a gang Node"),
    ]
    for name, patch, words in refusals:
        with pytest.raises(KubeForbidden) as refused:
            _patch(kube, name, patch)
        assert words in str(refused.value), (patch, str(refused.value))
        assert "ValidatingAdmissionPolicy" in str(refused.value)

    after = _read(kube, gang)
    assert after.labels == {
        c.POOL_LABEL: "pool-a",
        "kubernetes.io/os": "linux",
        c.GROUP_LABEL: "gen-2",
    }
    # The policy holds the controller only: an administrator's change goes through.
    _patch(controller["admin"], gang, {"metadata": {"labels": {"team": "vision"}}})
    assert _read(kube, gang).labels["team"] == "vision"
