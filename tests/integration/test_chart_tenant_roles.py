"""Who may `kubectl get gnp`, on the real apiserver (RBAC authorization) with the chart's
roles for people applied as rendered.

The local control plane runs no controller-manager, so `devenv.role_aggregation` does its
ClusterRole aggregation pass after each change of roles. Requests are made as service
accounts, by impersonation (the apiserver adds the account's groups, as for its token):
- bound cluster-wide to the built-in `view`: refused before the chart's role exists,
  allowed (list, and get of a pool that is not there answers 404, not 403) once it does;
- bound to `view` only in its namespace: refused, as for every cluster-scoped resource;
- its namespace's service accounts named in `rbac.poolViewers`: allowed; another
  namespace's account with the same namespace role: refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import dynamic  # type: ignore[import-untyped]

from devenv.controlplane import ControlPlane
from devenv.role_aggregation import aggregate
from provisioner.api import constants as c
from tests.chart.conftest import Helm

GROUP, VERSION, PLURAL = c.GROUP, "v1alpha1", "gangnodepools"


def _as(control_plane: ControlPlane, namespace: str, account: str) -> k8s.CustomObjectsApi:
    api = control_plane.api_client()
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{account}")
    return k8s.CustomObjectsApi(api)


def _status(call: Any, *args: Any) -> int:
    try:
        call(*args)
    except k8s.ApiException as err:
        return int(err.status)
    return 200


def reads(control_plane: ControlPlane, namespace: str, account: str) -> tuple[int, int]:
    """(list, get of a pool that does not exist) as that account: 200/404 when allowed."""
    api = _as(control_plane, namespace, account)
    listed = _status(api.list_cluster_custom_object, GROUP, VERSION, PLURAL)
    got = _status(api.get_cluster_custom_object, GROUP, VERSION, PLURAL, "no-such-pool")
    return listed, got


ALLOWED, REFUSED = (200, 404), (403, 403)


@pytest.fixture
def other_namespace(kube_api: Any) -> Iterator[str]:
    core = k8s.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _account(kube_api: Any, namespace: str, name: str, view_binding: str) -> None:
    """A service account; `view_binding` RoleBinding or ClusterRoleBinding to `view`."""
    k8s.CoreV1Api(kube_api).create_namespaced_service_account(
        namespace, {"metadata": {"name": name}}
    )
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    rbac = k8s.RbacAuthorizationV1Api(kube_api)
    if view_binding == "RoleBinding":
        body = {"metadata": {"name": f"{name}-view"}, "roleRef": ref, "subjects": [subject]}
        rbac.create_namespaced_role_binding(namespace, body)
    else:
        body = {"metadata": {"name": f"{namespace}-{name}-view"}, "roleRef": ref}
        rbac.create_cluster_role_binding({**body, "subjects": [subject]})


def test_view_holders_and_named_tenants_read_pools(
    tools: Any,
    control_plane: ControlPlane,
    kube_api: Any,
    namespace: str,
    other_namespace: str,
) -> None:
    _account(kube_api, namespace, "platform-viewer", "ClusterRoleBinding")
    _account(kube_api, namespace, "tenant", "RoleBinding")
    _account(kube_api, other_namespace, "tenant", "RoleBinding")
    aggregate(kube_api)
    # Without the chart's role, `view` holds nothing of ours even cluster-wide.
    assert reads(control_plane, namespace, "platform-viewer") == REFUSED

    helm = Helm(tools["helm"].binary)
    rendered = helm.render(
        {
            "fullnameOverride": f"agp-{namespace}",
            "rbac.poolViewers": [
                {
                    "kind": "Group",
                    "name": f"system:serviceaccounts:{namespace}",
                    "apiGroup": "rbac.authorization.k8s.io",
                }
            ],
        }
    )
    people = [
        o
        for o in rendered.all("ClusterRole") + rendered.all("ClusterRoleBinding")
        if o["metadata"]["name"].endswith(("-view", "-pool-viewers"))
    ]
    assert len(people) == 2, [o["metadata"]["name"] for o in people]
    client = dynamic.DynamicClient(kube_api)
    applied = []
    try:
        for obj in people:
            api = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            api.server_side_apply(body=obj, field_manager="helm", force_conflicts=True)
            applied.append((api, obj["metadata"]["name"]))
        assert "view" in aggregate(kube_api)

        assert reads(control_plane, namespace, "platform-viewer") == ALLOWED
        # The chart's poolViewers names this namespace's accounts...
        assert reads(control_plane, namespace, "tenant") == ALLOWED
        # ...and no other: `view` in a namespace never reaches a cluster-scoped pool.
        assert reads(control_plane, other_namespace, "tenant") == REFUSED
    finally:
        for api, name in applied:
            api.delete(name=name)
        aggregate(kube_api)
        k8s.RbacAuthorizationV1Api(kube_api).delete_cluster_role_binding(
            f"{namespace}-platform-viewer-view"
        )
