"""The chart's RBAC grants exactly the calls in provisioner/kube/permissions.py: nothing the
code needs is missing, nothing the code never makes is granted."""

from __future__ import annotations

from typing import Any

from provisioner.kube.permissions import CLUSTER_PERMISSIONS, NAMESPACE_PERMISSIONS, as_triples
from tests.chart.conftest import NAMESPACE, Rendered


def triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in rules:
        # Wildcards and resourceNames would make the comparison meaningless.
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        out |= {
            (group, resource, verb)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    return out


def test_cluster_role_is_exactly_the_codes_cluster_calls(rendered: Rendered) -> None:
    granted = triples(rendered.one("ClusterRole")["rules"])
    needed = as_triples(CLUSTER_PERMISSIONS)
    assert needed - granted == set(), "the code makes these calls and the chart denies them"
    assert granted - needed == set(), "the chart grants these and the code never makes them"


def test_role_is_exactly_the_codes_namespaced_calls(rendered: Rendered) -> None:
    role = rendered.one("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert triples(role["rules"]) == as_triples(NAMESPACE_PERMISSIONS)


def test_bindings_name_the_roles_and_the_service_account(rendered: Rendered) -> None:
    account = rendered.one("ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = rendered.one(binding_kind)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": rendered.one(role_kind)["metadata"]["name"],
        }


def test_leases_are_not_granted_cluster_wide(rendered: Rendered) -> None:
    groups = {g for rule in rendered.one("ClusterRole")["rules"] for g in rule["apiGroups"]}
    assert "coordination.k8s.io" not in groups
