"""The chart's RBAC grants exactly the calls in provisioner/kube/permissions.py: nothing the
code needs is missing, nothing the code never makes is granted."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api.owners import OWNER_KINDS
from provisioner.kube.permissions import (
    CLUSTER_PERMISSIONS,
    NAMESPACE_PERMISSIONS,
    OWNERSHIP_KEY_PERMISSIONS,
    WEBHOOK_CERT_CLUSTER_PERMISSIONS,
    WEBHOOK_CERT_NAMESPACE_PERMISSIONS,
    as_triples,
)
from tests.chart.conftest import NAMESPACE, Helm, Rendered


def fullname(rendered: Rendered) -> str:
    return str(rendered.one("Deployment")["metadata"]["name"])


def main_cluster_role(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("ClusterRole", fullname(rendered))


def lease_role(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Role", f"{fullname(rendered)}-leader-election")


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
    granted = triples(main_cluster_role(rendered)["rules"])
    needed = as_triples(CLUSTER_PERMISSIONS)
    assert needed - granted == set(), "the code makes these calls and the chart denies them"
    assert granted - needed == set(), "the chart grants these and the code never makes them"


def test_role_is_exactly_the_codes_namespaced_calls(rendered: Rendered) -> None:
    role = lease_role(rendered)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert triples(role["rules"]) == as_triples(NAMESPACE_PERMISSIONS)


def test_bindings_name_the_roles_and_the_service_account(rendered: Rendered) -> None:
    account = rendered.one("ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        # The role for people (test_chart_people_roles) is aggregated, not bound to us.
        people = {f"{fullname(rendered)}-view", f"{fullname(rendered)}-class-edit"}
        roles = [r for r in rendered.all(role_kind) if r["metadata"]["name"] not in people]
        assert len(roles) == len(rendered.all(binding_kind))
        for role in roles:
            binding = rendered.one(binding_kind, role["metadata"]["name"])
            assert binding["subjects"] == [subject]
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": role_kind,
                "name": role["metadata"]["name"],
            }


def test_leases_are_not_granted_cluster_wide(rendered: Rendered) -> None:
    groups = {
        g
        for role in rendered.all("ClusterRole")
        for rule in role["rules"]
        for g in rule["apiGroups"]
    }
    assert "coordination.k8s.io" not in groups


# -- webhook certificates (issue #30, certs) ---------------------------------------------------
def scoped_triples(rules: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    """{(apiGroup, resource, verb): resourceNames}; every rule must name its objects."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for rule in rules:
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule
        assert rule.get("resourceNames"), f"a certificate rule without resourceNames: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out[(group, resource, verb)] = rule["resourceNames"]
    return out


def test_certificate_rules_name_only_the_secret_and_the_webhook_configuration(
    rendered: Rendered,
) -> None:
    """The default (certMode=selfSigned) grants the rotator exactly its calls, each scoped
    by resourceNames to the release's certificate Secret or its webhook configuration, and
    no create: the chart renders the Secret itself."""
    name = f"{fullname(rendered)}-webhook-certs"
    secret = rendered.one("Secret", name)["metadata"]["name"]
    config = rendered.one("ValidatingWebhookConfiguration")["metadata"]["name"]
    role = rendered.one("Role", name)
    assert role["metadata"]["namespace"] == NAMESPACE
    namespaced = scoped_triples(role["rules"])
    assert set(namespaced) == as_triples(WEBHOOK_CERT_NAMESPACE_PERMISSIONS)
    assert all(names == [secret] for names in namespaced.values())
    cluster = scoped_triples(rendered.one("ClusterRole", name)["rules"])
    assert set(cluster) == as_triples(WEBHOOK_CERT_CLUSTER_PERMISSIONS)
    assert all(names == [config] for names in cluster.values())
    verbs = {verb for _, _, verb in set(namespaced) | set(cluster)}
    assert verbs <= {"get", "update", "patch"}
    # No other role may touch Secrets or webhook configurations.
    for role in rendered.all("Role") + rendered.all("ClusterRole"):
        if role["metadata"]["name"] in (name, f"{fullname(rendered)}-ownership-key"):
            continue
        resources = {r for rule in role["rules"] for r in rule["resources"]}
        assert not resources & {"secrets", "validatingwebhookconfigurations"}, role


@pytest.mark.parametrize("mode", ["certManager", "provided"])
def test_other_certificate_modes_grant_no_certificate_rules(helm: Helm, mode: str) -> None:
    values = {"webhook.certMode": mode}
    if mode == "provided":
        values |= {"webhook.tls.secretName": "my-tls", "webhook.caBundle": "Q0E="}
    rendered = helm.render(values)
    assert sorted(r["metadata"]["name"] for r in rendered.all("ClusterRole")) == [
        fullname(rendered),
        f"{fullname(rendered)}-class-edit",
        f"{fullname(rendered)}-view",
    ]
    assert sorted(r["metadata"]["name"] for r in rendered.all("Role")) == [
        f"{fullname(rendered)}-leader-election",
        f"{fullname(rendered)}-ownership-key",
    ]


# -- the self-managed ownership key (issue #30, ownkey) -----------------------------------------
def test_ownership_key_rule_names_only_its_secret(helm: Helm, rendered: Rendered) -> None:
    """By default the controller may get and update the ownership-key Secret and no other,
    and may not create it: the chart renders it. A provided key (keySecret) grants none."""
    name = f"{fullname(rendered)}-ownership-key"
    role = rendered.one("Role", name)
    assert role["metadata"]["namespace"] == NAMESPACE
    granted = scoped_triples(role["rules"])
    assert set(granted) == as_triples(OWNERSHIP_KEY_PERMISSIONS)
    assert all(names == [name] for names in granted.values())
    assert rendered.one("RoleBinding", name)["roleRef"]["name"] == name
    provided = helm.render({"ownership.keySecret": "my-ownership-key"})
    assert name not in [r["metadata"]["name"] for r in provided.all("Role")]


def test_the_owner_of_every_supported_kind_is_readable(rendered: Rendered) -> None:
    # The Workload reconciler reads a gang's owner of each kind by informer (list, watch)
    # or GET: a kind the chart denies would be a 403 and a gang never admitted.
    granted = triples(main_cluster_role(rendered)["rules"])
    for kind in OWNER_KINDS:
        for verb in ("get", "list", "watch"):
            assert (kind.group, kind.plural, verb) in granted, (kind.display_name, verb)
