"""`atomic-gang doctor`'s check of the DaemonSets every gang node needs.

Called by `doctor.Doctor`, after the queue links. Every gang node carries the taint
`atomic-gang.k8s.aws/gang=<pool>:NoSchedule` (`cloud.nodeadm`), so a DaemonSet runs on it
only if its pod template tolerates that taint for every pool (operator Exists on the key,
or an empty key). Without the device plugins a gang node is Ready but never advertises
`nvidia.com/gpu` or `vpc.amazonaws.com/efa`, and every gang pod stays Pending while N
instances bill; without aws-node or kube-proxy its pods get no network. `needed` picks the
DaemonSets a gang node needs, by name and labels (the NVIDIA device plugin, or the GPU
operator's DaemonSets, whose tolerations its ClusterPolicy sets; the EFA and Neuron device
plugins; aws-node; kube-proxy; eks-pod-identity-agent; CSI node plugins), `findings` says
which of them do not tolerate the gang taint, each with the `kubectl patch` that fixes it.
Both are pure; `DaemonSetCheck` lists DaemonSets (every namespace) through `provisioner.kube`.
docs/GANG-NODES.md explains each.

The toleration rule is Kubernetes' `Toleration.ToleratesTaint` (an empty effect matches
every effect; Exists with an empty key matches every taint; Equal needs key and value).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api.tolerations import tolerates
from provisioner.commands.checks import Failed
from provisioner.commands.doctor_kube import Reader
from provisioner.kube.resources import ResourceRef

__all__ = [
    "DAEMONSETS",
    "GANG_TOLERATION",
    "DaemonSetCheck",
    "Finding",
    "Role",
    "findings",
    "needed",
    "role_of",
    "tolerates_every_pool",
]

DAEMONSETS = ResourceRef("apps", "v1", "daemonsets", True, "DaemonSet")
# What each DaemonSet needs: the gang taint of any pool, NoSchedule.
GANG_TOLERATION: Final = {"key": c.GANG_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
GPU_OPERATOR_NAMESPACE: Final = "gpu-operator"
CLUSTER_POLICY_KIND: Final = "ClusterPolicy"
# A value no pool is named: an Equal toleration naming one pool does not tolerate it.
_ANY_POOL: Final = "\x00every-pool"


class Role(Enum):
    """Why a gang node needs the DaemonSet."""

    NVIDIA = "registers nvidia.com/gpu (NVIDIA device plugin)"
    GPU_OPERATOR = "part of the NVIDIA GPU operator (driver, toolkit, device plugin)"
    EFA = "registers vpc.amazonaws.com/efa (EFA device plugin)"
    NEURON = "registers aws.amazon.com/neuron (Neuron device plugin)"
    CNI = "gives pods their network (VPC CNI)"
    KUBE_PROXY = "routes Service traffic (kube-proxy)"
    POD_IDENTITY = "gives pods their AWS credentials (EKS Pod Identity agent)"
    CSI = "mounts the pods' volumes (CSI node plugin)"


# The EKS add-ons by their exact names (aws-node-termination-handler is not the CNI)...
_BY_NAME: Final = {
    "aws-node": Role.CNI,
    "kube-proxy": Role.KUBE_PROXY,
    "eks-pod-identity-agent": Role.POD_IDENTITY,
}
# ...the device plugins and CSI node plugins by what their names contain, whoever installed
# them (the NVIDIA chart's `nvidia-device-plugin`, the static `-daemonset`, `ebs-csi-node`).
_BY_FRAGMENT: Final = (
    ("nvidia-device-plugin", Role.NVIDIA),
    ("efa-k8s-device-plugin", Role.EFA),
    ("efa-device-plugin", Role.EFA),
    ("neuron-device-plugin", Role.NEURON),
    ("csi-node", Role.CSI),
)
_NAME_LABELS: Final = ("app.kubernetes.io/name", "k8s-app", "app", "name")


@dataclass(frozen=True)
class Finding:
    """A DaemonSet a gang node needs that does not tolerate the gang taint, with the fix."""

    namespace: str
    name: str
    role: Role
    patch: str

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"


def _meta(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    return ds.get("metadata") or {}


def _pod_spec(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def _owner_policy(ds: Mapping[str, Any]) -> str | None:
    for owner in _meta(ds).get("ownerReferences") or []:
        if owner.get("kind") == CLUSTER_POLICY_KIND:
            return str(owner.get("name"))
    return None


def role_of(ds: Mapping[str, Any]) -> Role | None:
    """Why a gang node needs `ds`, or None if it does not (by name, labels, owner)."""
    meta = _meta(ds)
    if _owner_policy(ds) is not None or meta.get("namespace") == GPU_OPERATOR_NAMESPACE:
        return Role.GPU_OPERATOR
    labels = meta.get("labels") or {}
    names = [str(meta.get("name") or ""), *(str(labels.get(k) or "") for k in _NAME_LABELS)]
    for name in names:
        if name in _BY_NAME:
            return _BY_NAME[name]
    for fragment, role in _BY_FRAGMENT:
        if any(fragment in n for n in names if n):
            return role
    return None


def needed(daemonsets: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Role]]:
    """The DaemonSets a gang node needs, with why, sorted by namespace and name."""
    found = [(ds, role) for ds in daemonsets if (role := role_of(ds)) is not None]
    return sorted(found, key=lambda x: (_meta(x[0]).get("namespace", ""), _meta(x[0]).get("name")))


def tolerates_every_pool(tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether these tolerate `atomic-gang.k8s.aws/gang=<pool>:NoSchedule` for any pool:
    a value no pool has, so only a toleration of the key (or of everything) passes."""
    taint = {"key": c.GANG_TAINT_KEY, "value": _ANY_POOL, "effect": "NoSchedule"}
    return tolerates(tolerations, taint)


def _patch(ds: Mapping[str, Any]) -> str:
    """The `kubectl patch` that adds the gang toleration (to the GPU operator's
    ClusterPolicy for its DaemonSets: the operator would undo a patch of its own)."""
    policy = _owner_policy(ds)
    value = json.dumps(GANG_TOLERATION, separators=(",", ":"))
    if policy is not None:
        op = f'[{{"op":"add","path":"/spec/daemonsets/tolerations/-","value":{value}}}]'
        return f"kubectl patch clusterpolicies.nvidia.com {policy} --type=json -p '{op}'"
    meta = _meta(ds)
    if _pod_spec(ds).get("tolerations"):
        op = f'[{{"op":"add","path":"/spec/template/spec/tolerations/-","value":{value}}}]'
    else:
        op = f'[{{"op":"add","path":"/spec/template/spec/tolerations","value":[{value}]}}]'
    return (
        f"kubectl -n {meta.get('namespace')} patch daemonset {meta.get('name')} "
        f"--type=json -p '{op}'"
    )


def findings(daemonsets: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """The needed DaemonSets that do not tolerate the gang taint of every pool."""
    return [
        Finding(str(_meta(ds).get("namespace")), str(_meta(ds).get("name")), role, _patch(ds))
        for ds, role in needed(daemonsets)
        if not tolerates_every_pool(_pod_spec(ds).get("tolerations") or [])
    ]


@dataclass
class DaemonSetCheck:
    """doctor's line "DaemonSets on gang nodes", over every namespace's DaemonSets."""

    kube: Reader

    def check(self) -> str:
        daemonsets = list(self.kube.list(DAEMONSETS).items)
        missing = findings(daemonsets)
        if missing:
            detail = "; ".join(f"{f.where} ({f.role.value})" for f in missing)
            raise Failed(
                f"{len(missing)} DaemonSet(s) a gang node needs do not tolerate the gang "
                f"taint {c.GANG_TAINT_KEY}=<pool>:NoSchedule, so they never run on gang "
                f"nodes: {detail}",
                "add the toleration (docs/GANG-NODES.md; for an EKS add-on, in its "
                "configuration values too, so an update keeps it): "
                + " ; ".join(f.patch for f in missing),
            )
        roles = {role for _, role in needed(daemonsets)}
        names = ", ".join(
            f"{_meta(ds).get('namespace')}/{_meta(ds).get('name')}" for ds, _ in needed(daemonsets)
        )
        gpu = (
            ""
            if roles & {Role.NVIDIA, Role.GPU_OPERATOR}
            else "; no NVIDIA device plugin or GPU operator found (GPU gangs need one)"
        )
        if not names:
            return f"no DaemonSet a gang node needs was found{gpu}"
        return f"every DaemonSet a gang node needs tolerates the gang taint ({names}){gpu}"
