"""The chart's role for people: read-only access to every resource of ours, aggregated into
the cluster's view, edit and admin roles, and bound to `rbac.poolViewers` only when named.
What it grants on a real apiserver: tests/integration/test_chart_tenant_roles.py."""

from __future__ import annotations

from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

from tests.chart.conftest import CHART, Helm, Rendered
from tests.chart.test_chart_rbac import fullname, triples

AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def people_role(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("ClusterRole", f"{fullname(rendered)}-view")


def our_resources() -> set[tuple[str, str]]:
    """(group, plural) of every CRD the chart installs: each is something a tenant reads."""
    out = set()
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            spec = crd["spec"]
            out.add((spec["group"], spec["names"]["plural"]))
            if any("status" in v.get("subresources", {}) for v in spec["versions"]):
                out.add((spec["group"], f"{spec['names']['plural']}/status"))
    return out


def test_people_read_every_resource_of_ours_and_change_none(rendered: Rendered) -> None:
    role = people_role(rendered)
    expected = {(g, r, v) for g, r in our_resources() for v in ("get", "list", "watch")}
    assert expected and triples(role["rules"]) == expected


def test_the_role_is_aggregated_into_view_edit_and_admin(rendered: Rendered) -> None:
    labels = people_role(rendered)["metadata"]["labels"]
    for role in ("view", "edit", "admin"):
        assert labels[f"{AGGREGATE}{role}"] == "true", role


def test_no_one_is_bound_to_it_unless_named(helm: Helm, rendered: Rendered) -> None:
    name = f"{fullname(rendered)}-pool-viewers"
    assert name not in [b["metadata"]["name"] for b in rendered.all("ClusterRoleBinding")]
    subject = {"kind": "Group", "name": "ml-researchers", "apiGroup": "rbac.authorization.k8s.io"}
    binding = helm.render({"rbac.poolViewers": [subject]}).one("ClusterRoleBinding", name)
    assert binding["subjects"] == [subject]
    assert binding["roleRef"]["name"] == people_role(rendered)["metadata"]["name"]


def test_a_subject_without_a_kind_is_refused(helm: Helm) -> None:
    error = helm.render_error({"rbac.poolViewers": [{"name": "ml-researchers"}]})
    assert "/rbac/poolViewers/0" in error and "kind" in error, error
