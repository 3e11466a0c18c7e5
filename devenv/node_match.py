"""Whether a pod template may run on a Node: taints against tolerations, nodeSelector and
required node affinity, by the Kubernetes rules.

Used by the pod simulator (`podsim`, the scheduler's part) and the device-plugin model
(`device_plugins`, the DaemonSet controller's part). Pure functions of plain dicts, as the
apiserver returns them. The rules followed, from the Kubernetes documentation
(concepts/scheduling-eviction/taint-and-toleration, assign-pod-node) and
`k8s.io/api/core/v1` `Toleration.ToleratesTaint`:
- a toleration with an empty effect matches every effect, else only its own;
- operator `Exists` (value must be empty) matches a taint of its key, and with an empty key
  every taint; operator `Equal` (the default) matches key and value;
- only NoSchedule and NoExecute taints keep a pod off a node (PreferNoSchedule is a
  preference the scheduler may ignore);
- every nodeSelector pair must match a label; of the required affinity's nodeSelectorTerms
  one must match, with all its matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from provisioner.api.tolerations import tolerates

__all__ = [
    "BLOCKING_EFFECTS",
    "affinity_matches",
    "selector_matches",
    "tolerates",
    "untolerated",
]

# Taint effects a pod must tolerate to be scheduled (PreferNoSchedule is only a preference).
BLOCKING_EFFECTS: Final = ("NoSchedule", "NoExecute")


def untolerated(
    tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The NoSchedule/NoExecute taints of `taints` that no toleration tolerates: what keeps
    a pod with these tolerations off the node (empty: it may run there)."""
    tols = list(tolerations)
    return [t for t in taints if t.get("effect") in BLOCKING_EFFECTS and not tolerates(tols, t)]


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def affinity_matches(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution: any term, all its expressions."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(
        all(_expression_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def selector_matches(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The pod spec's nodeSelector and required node affinity both match `labels`."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    return affinity_matches(spec, labels)
