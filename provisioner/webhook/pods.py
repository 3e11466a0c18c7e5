"""One AdmissionReview for a Pod in, its answer out: only a pool's own pods on its nodes.

DESIGN section 11: a pod from a namespace that may not use a pool is refused at admission,
whatever it tolerates. Which pools' nodes a pod can run on is `api.pod_reach`'s pure rule
(tolerates the gang taint AND selects the pool's nodes, or names a pool's node in
`spec.nodeName`); whether its namespace may use each of them is the Job rule
(`api.tenancy.foreign_pool_problem`: the pool's owner namespace, or one the installer
shares it with). A pool that does not exist is refused too: a pending pod aimed at it
would land on whichever namespace's nodes come to bear its name. A pod that could reach
every pool (it tolerates every gang taint and selects gang nodes by the group label, say)
is let through only for a namespace the installer shares every pool with.

Two kinds of pods are let onto any gang node, as the nodes need them:
- a DaemonSet's pod (the NVIDIA and EFA device plugins, aws-node, kube-proxy, the pod
  identity agent, CSI node plugins): its controller reference must name a DaemonSet that
  exists in its namespace with that uid (`controller_refs`). The DaemonSet controller pins
  each of its pods to one node with a `metadata.name` field selector, so without this
  every device plugin outside kube-system would be refused on the nodes that need it. A
  DaemonSet runs one pod per node it tolerates, for whoever may create one in that
  namespace; the webhook keeps a pod from borrowing that reference it does not own;
- a mirror pod its own node creates for a static pod (the request comes from
  `system:node:<spec.nodeName>`).

kube-system is not sent at all (the chart's namespaceSelector): only cluster admins create
pods there, and its agents must start even while no webhook replica answers.

The apiserver sends only pods that tolerate the gang taint or every taint, or name a node
(the chart's matchConditions), so ordinary pods never wait on the webhook. An update is
judged again only when it changes where the pod may run (tolerations can be added to a
pending pod, node selectors to a gated one). Nodes, pools and owners are read live;
a read that fails raises `ClusterReadError`, answered with an error for the failurePolicy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api.owners import DAEMON_SET
from provisioner.api.pod_reach import PodPlacement, PodReach, named_nodes, pod_reach
from provisioner.api.settings import Settings
from provisioner.api.tenancy import ClusterReadError, foreign_pool_problem, shares_every_pool
from provisioner.webhook.controller_refs import OwnerLookup, no_owners, proven_controller
from provisioner.webhook.review import ADMISSION_API_VERSION, PoolLookup, ReviewError

__all__ = ["NodeLookup", "no_nodes", "review_pod"]

NodeLookup = Callable[[str], str | None]
"""The pool label of the Node of that name as the apiserver holds it now; None for a node
of no pool, or no such node; raises `api.tenancy.ClusterReadError` when it cannot be read."""

_CHECKED_OPERATIONS: Final = ("CREATE", "UPDATE")
_MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"


def no_nodes(name: str) -> str | None:
    """A lookup for a webhook given no node reader: a pod naming a node cannot be judged."""
    raise ClusterReadError(f"cannot read Node {name}: this webhook has no node reader")


@dataclass(frozen=True)
class _Refusal:
    field: str
    message: str


def _placement(pod: Mapping[str, Any]) -> PodPlacement:
    return PodPlacement.model_validate(pod.get("spec") or {})


def _is_mirror_of_its_node(request: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = str(spec.get("nodeName") or "")
    user = str((request.get("userInfo") or {}).get("username") or "")
    annotations = meta.get("annotations") or {}
    return bool(node) and _MIRROR_ANNOTATION in annotations and user == f"system:node:{node}"


def _how(reach: PodReach) -> str:
    return ", ".join(reach.fields)


def _refusals(
    namespace: str, name: str, reach: PodReach, settings: Settings, pools: PoolLookup
) -> list[_Refusal]:
    field = reach.fields[0]
    if reach.pools.every_but:
        if shares_every_pool(settings.tenancy, namespace):
            return []
        return [
            _Refusal(
                field,
                f"Pod {name} in namespace {namespace} could run on the nodes of any gang "
                f"pool ({_how(reach)}): gang nodes run only their pool's own pods. Select "
                f"one pool by its label {c.POOL_LABEL}=<pool> and tolerate only its taint "
                f"{c.GANG_TAINT_KEY}=<pool>:NoSchedule, or ask the installer to share "
                f'every pool ("*") with namespace {namespace} in tenancy.sharedPools.',
            )
        ]
    out: list[_Refusal] = []
    for pool_name in sorted(reach.pools.names):
        pool = pools(pool_name)
        if pool is None:
            out.append(
                _Refusal(
                    field,
                    f"Pod {name} in namespace {namespace} would run on the nodes of pool "
                    f"{pool_name} ({_how(reach)}), which does not exist: a pod may go to a "
                    "pool's nodes only once a gang of its namespace has made the pool. "
                    f"Submit the gang Job first, or drop the selection of pool {pool_name}.",
                )
            )
            continue
        owner = pool.spec.owner_namespace
        if foreign_pool_problem(pool_name, owner, namespace, settings.tenancy) is None:
            continue
        out.append(
            _Refusal(
                field,
                f"Pod {name} in namespace {namespace} would run on the nodes of pool "
                f"{pool_name} ({_how(reach)}), which belongs to namespace {owner}: only "
                f"pods of namespace {owner} may run there. Remove the toleration of "
                f"{c.GANG_TAINT_KEY} or the selection of the pool's nodes, or ask the "
                f"installer to share pool {pool_name} with namespace {namespace} in the "
                "controller's tenancy.sharedPools setting.",
            )
        )
    return out


def _denied(uid: str, name: str, refusals: list[_Refusal]) -> dict[str, Any]:
    message = " ".join(r.message for r in refusals)
    causes = [
        {"type": "FieldValueForbidden", "field": r.field, "message": r.message} for r in refusals
    ]
    return {
        "uid": uid,
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": message,
            "details": {"group": "", "kind": "Pod", "name": name, "causes": causes},
        },
    }


def _verdict(
    request: Mapping[str, Any],
    settings: Settings,
    pools: PoolLookup,
    nodes: NodeLookup,
    owners: OwnerLookup,
) -> dict[str, Any]:
    uid = str(request["uid"])
    allowed = {"uid": uid, "allowed": True}
    pod = request.get("object")
    if request.get("operation") not in _CHECKED_OPERATIONS or not isinstance(pod, Mapping):
        return allowed
    placement = _placement(pod)
    old = request.get("oldObject")
    if isinstance(old, Mapping) and _placement(old) == placement:
        return allowed
    if _is_mirror_of_its_node(request, pod):
        return allowed
    reach = pod_reach(placement, {n: nodes(n) for n in sorted(named_nodes(placement))})
    if reach.pools.empty:
        return allowed
    meta = pod.get("metadata") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    if proven_controller(meta, namespace, (DAEMON_SET,), owners) is not None:
        return allowed
    name = str(meta.get("name") or meta.get("generateName") or "")
    refusals = _refusals(namespace, name, reach, settings, pools)
    return _denied(uid, name, refusals) if refusals else allowed


def review_pod(
    body: Any,
    settings: Settings,
    *,
    pools: PoolLookup,
    nodes: NodeLookup = no_nodes,
    owners: OwnerLookup = no_owners,
) -> dict[str, Any]:
    """The AdmissionReview answering `body`, a Pod's; raises `ReviewError` for a malformed
    one or another kind, `ClusterReadError` when a node, pool or owner cannot be read."""
    if not isinstance(body, Mapping):
        raise ReviewError("the body is not a JSON object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request with a uid")
    kind = request.get("kind")
    raw: Mapping[str, Any] = kind if isinstance(kind, Mapping) else {}
    if (str(raw.get("group", "")), str(raw.get("kind", ""))) != ("", "Pod"):
        raise ReviewError(f"this path judges Pods, not {raw.get('kind') or 'an unnamed kind'}")
    try:
        response = _verdict(request, settings, pools, nodes, owners)
    except (TypeError, ValueError, AttributeError) as err:
        raise ReviewError(f"the pod in the request is malformed: {err}") from err
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
