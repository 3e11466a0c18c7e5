"""One pass of kube-controller-manager's ClusterRole aggregation, which the local control
plane does not run (it has no controller-manager: see `controlplane`).

Kubernetes fills an aggregated ClusterRole's rules (the built-in view, edit and admin) from
every ClusterRole its `aggregationRule` selects: "Aggregated ClusterRoles" in the RBAC
documentation, implemented by pkg/controller/clusterroleaggregation. This follows that
controller: per selector in order, the selected roles sorted by name (the role itself
skipped), their rules appended unless an equal rule is already there, and the result
applied server-side under the controller's field manager when it differs. Tests that show
what a built-in role grants call `aggregate` after changing the roles it selects.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes import dynamic  # type: ignore[import-untyped]

__all__ = ["aggregate"]

FIELD_MANAGER = "clusterrole-aggregation-controller"


def _selector(selector: dict[str, Any]) -> str:
    # The built-in roles select by matchLabels only.
    assert not selector.get("match_expressions"), selector
    return ",".join(f"{k}={v}" for k, v in sorted((selector.get("match_labels") or {}).items()))


def _rule(rule: Any) -> dict[str, Any]:
    out = {
        "apiGroups": rule.api_groups,
        "resources": rule.resources,
        "resourceNames": rule.resource_names,
        "nonResourceURLs": rule.non_resource_urls,
        "verbs": rule.verbs,
    }
    return {k: v for k, v in out.items() if v}


def aggregate(api: k8s.ApiClient) -> list[str]:
    """Bring every aggregated ClusterRole's rules up to date; return the names changed."""
    rbac = k8s.RbacAuthorizationV1Api(api)
    roles = dynamic.DynamicClient(api).resources.get(
        api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole"
    )
    changed = []
    # view is itself selected by edit, and edit by admin: repeat until nothing moves.
    for _ in range(4):
        moved = False
        for role in rbac.list_cluster_role().items:
            if role.aggregation_rule is None:
                continue
            rules: list[dict[str, Any]] = []
            for selector in role.aggregation_rule.cluster_role_selectors or []:
                labels = _selector(selector.to_dict())
                selected = rbac.list_cluster_role(label_selector=labels).items
                for other in sorted(selected, key=lambda r: r.metadata.name):
                    if other.metadata.name == role.metadata.name:
                        continue
                    rules += [r for r in map(_rule, other.rules or []) if r not in rules]
            if rules == [_rule(r) for r in role.rules or []]:
                continue
            body = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role.metadata.name},
                "rules": rules,
            }
            roles.server_side_apply(body=body, field_manager=FIELD_MANAGER, force_conflicts=True)
            changed.append(role.metadata.name)
            moved = True
        if not moved:
            return changed
    raise RuntimeError("ClusterRole aggregation did not settle")
