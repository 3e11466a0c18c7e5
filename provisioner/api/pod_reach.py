"""Which pools' nodes a Pod can run on: the pure rule behind the pod webhook.

Every gang node carries the pool's labels (`atomic-gang.k8s.aws/pool`, `.../group`) and
the taint `atomic-gang.k8s.aws/gang=<pool>:NoSchedule` (`cloud.nodeadm`). A Pod reaches a
pool's nodes in one of two ways:

- through the scheduler, when it tolerates the pool's taint (by key and value, by key with
  `Exists`, or by an empty key with `Exists`) AND selects the pool's nodes: a nodeSelector
  or a required node affinity on the pool or group label (`In`, `Exists`, `Gt`, `Lt`), a
  `metadata.name` field selector naming a node of the pool (how a DaemonSet pins its pod
  to one node), a preferred node affinity on them, or a pod affinity (co-location with
  another pod, which may be on any gang node);
- around the scheduler, with `spec.nodeName` naming a node of the pool: the kubelet
  checks only `NoExecute` taints, so no toleration is needed then.

A Pod that tolerates the taint but selects no gang node (an agent tolerating everything,
placed wherever the scheduler likes) does not reach a pool here; that is the documented
limit of the rule (docs/POD_ADMISSION.md). `NotIn` and `DoesNotExist` on the pool label
exclude nodes and never select one.

Node selection follows the scheduler's documented semantics ("Assigning Pods to Nodes",
kubernetes.io): nodeSelector entries and the expressions of one term are ANDed, the terms
of a node affinity are ORed, and nodeSelector and node affinity must both hold. Pool sets
follow the same algebra (`PoolSet`), so a pool is never left out of what a pod can reach.

`named_nodes` lists the nodes a pod names, whose pools the caller reads (I/O) before
calling `pod_reach` with them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import Field

from provisioner.api import constants as c
from provisioner.api.meta import KubeModel
from provisioner.api.workload import Toleration

__all__ = [
    "Affinity",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodPlacement",
    "PodReach",
    "PoolSet",
    "named_nodes",
    "pod_reach",
    "tolerated_pools",
]

# Operators that hold only for a node that has the label.
_SELECTING: Final = frozenset({"In", "Exists", "Gt", "Lt"})
_NODE_NAME_FIELD: Final = "metadata.name"
FIELD_NODE_NAME: Final = "spec.nodeName"
FIELD_NODE_SELECTOR: Final = "spec.nodeSelector"
FIELD_REQUIRED: Final = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
FIELD_PREFERRED: Final = (
    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
)
FIELD_POD_AFFINITY: Final = "spec.affinity.podAffinity"


@dataclass(frozen=True)
class PoolSet:
    """A set of pool names, finite (`names`) or every pool but `names` (`every_but`)."""

    names: frozenset[str] = frozenset()
    every_but: bool = False

    @classmethod
    def of(cls, names: Iterable[str]) -> PoolSet:
        return cls(frozenset(names))

    @property
    def empty(self) -> bool:
        return not self.every_but and not self.names

    def __and__(self, other: PoolSet) -> PoolSet:
        if not self.every_but and not other.every_but:
            return PoolSet(self.names & other.names)
        if self.every_but and other.every_but:
            return PoolSet(self.names | other.names, every_but=True)
        finite, cofinite = (self, other) if other.every_but else (other, self)
        return PoolSet(finite.names - cofinite.names)

    def __or__(self, other: PoolSet) -> PoolSet:
        if not self.every_but and not other.every_but:
            return PoolSet(self.names | other.names)
        if self.every_but and other.every_but:
            return PoolSet(self.names & other.names, every_but=True)
        finite, cofinite = (self, other) if other.every_but else (other, self)
        return PoolSet(cofinite.names - finite.names, every_but=True)


NO_POOL: Final = PoolSet()
EVERY_POOL: Final = PoolSet(every_but=True)


# --- the typed view of a pod's placement (corev1 names) -----------------------------------
class NodeSelectorRequirement(KubeModel):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTerm(KubeModel):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(KubeModel):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class PreferredSchedulingTerm(KubeModel):
    weight: int = 0
    preference: NodeSelectorTerm = NodeSelectorTerm()


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()


class PodAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: tuple[dict[str, Any], ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[dict[str, Any], ...] = ()


class Affinity(KubeModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None


class PodPlacement(KubeModel):
    """The fields of a Pod's spec that decide which nodes it may run on."""

    node_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: Affinity | None = None

    @property
    def node_affinity(self) -> NodeAffinity:
        return (self.affinity.node_affinity if self.affinity else None) or NodeAffinity()


@dataclass(frozen=True)
class PodReach:
    """The pools whose nodes a pod can run on, and the fields of the pod that take it
    there (for the refusal's causes); `pools` is empty for a pod that reaches none."""

    pools: PoolSet
    fields: tuple[str, ...] = ()


# --- tolerations -------------------------------------------------------------------------
def _tolerates(toleration: Toleration) -> PoolSet:
    """The pools whose gang taint (key gang, value <pool>, effect NoSchedule) this
    toleration tolerates, as corev1's `Toleration.ToleratesTaint` decides."""
    if toleration.effect not in (None, "", "NoSchedule"):
        return NO_POOL
    operator = toleration.operator or "Equal"
    key = toleration.key or ""
    if key == "":
        return EVERY_POOL if operator == "Exists" else NO_POOL
    if key != c.GANG_TAINT_KEY:
        return NO_POOL
    if operator == "Exists":
        return EVERY_POOL
    return PoolSet.of([toleration.value or ""]) if operator == "Equal" else NO_POOL


def tolerated_pools(placement: PodPlacement) -> PoolSet:
    """The pools whose gang taint the pod tolerates."""
    out = NO_POOL
    for toleration in placement.tolerations:
        out = out | _tolerates(toleration)
    return out


# --- node selection ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Selection:
    """What a node constraint lets through: the pools whose nodes can satisfy it, and
    whether it selects gang nodes at all (else it says nothing about pools)."""

    pools: PoolSet
    selects: bool

    def both(self, other: _Selection) -> _Selection:
        return _Selection(self.pools & other.pools, self.selects or other.selects)

    def either(self, other: _Selection) -> _Selection:
        return _Selection(self.pools | other.pools, self.selects or other.selects)


_UNCONSTRAINED: Final = _Selection(EVERY_POOL, selects=False)
_NOTHING: Final = _Selection(NO_POOL, selects=False)


def _on_label(req: NodeSelectorRequirement) -> _Selection:
    if req.key == c.POOL_LABEL:
        if req.operator == "In":
            return _Selection(PoolSet.of(req.values), selects=True)
        if req.operator == "NotIn":
            return _Selection(PoolSet(frozenset(req.values), every_but=True), selects=False)
        if req.operator == "DoesNotExist":
            return _Selection(NO_POOL, selects=False)
        return _Selection(EVERY_POOL, selects=req.operator in _SELECTING)
    if req.key == c.GROUP_LABEL:  # group names (gen-<n>) repeat across pools
        return _Selection(EVERY_POOL, selects=req.operator in _SELECTING)
    return _UNCONSTRAINED


def _on_field(req: NodeSelectorRequirement, node_pools: Mapping[str, str | None]) -> _Selection:
    if req.key != _NODE_NAME_FIELD or req.operator != "In":
        return _UNCONSTRAINED
    pools = PoolSet.of(p for n in req.values if (p := node_pools.get(n)) is not None)
    return _Selection(pools, selects=not pools.empty)


def _term(term: NodeSelectorTerm, node_pools: Mapping[str, str | None]) -> _Selection:
    if not term.match_expressions and not term.match_fields:
        return _NOTHING  # an empty term matches no node
    out = _UNCONSTRAINED
    for req in term.match_expressions:
        out = out.both(_on_label(req))
    for req in term.match_fields:
        out = out.both(_on_field(req, node_pools))
    return out


def _any_of(terms: Iterable[NodeSelectorTerm], node_pools: Mapping[str, str | None]) -> _Selection:
    out: _Selection | None = None
    for term in terms:
        one = _term(term, node_pools)
        out = one if out is None else out.either(one)
    return _UNCONSTRAINED if out is None else out


def named_nodes(placement: PodPlacement) -> frozenset[str]:
    """The nodes the pod names: `spec.nodeName` and `metadata.name` field selectors."""
    names = {placement.node_name} if placement.node_name else set()
    affinity = placement.node_affinity
    required = affinity.required_during_scheduling_ignored_during_execution
    terms = list(required.node_selector_terms if required else ())
    terms += [p.preference for p in affinity.preferred_during_scheduling_ignored_during_execution]
    for term in terms:
        for req in term.match_fields:
            if req.key == _NODE_NAME_FIELD and req.operator == "In":
                names.update(req.values)
    return frozenset(names)


def pod_reach(placement: PodPlacement, node_pools: Mapping[str, str | None]) -> PodReach:
    """The pools whose nodes the pod can run on, given the pool of each node it names
    (`named_nodes`; None for a node of no pool or no node at all)."""
    if placement.node_name:
        pool = node_pools.get(placement.node_name)
        if pool is None:
            return PodReach(NO_POOL)
        return PodReach(PoolSet.of([pool]), (FIELD_NODE_NAME,))
    by_selector = _UNCONSTRAINED
    for key, value in sorted(placement.node_selector.items()):
        entry = NodeSelectorRequirement(key=key, operator="In", values=(value,))
        by_selector = by_selector.both(_on_label(entry))
    affinity = placement.node_affinity
    required = affinity.required_during_scheduling_ignored_during_execution
    by_required = _any_of(required.node_selector_terms if required else (), node_pools)
    preferred = affinity.preferred_during_scheduling_ignored_during_execution
    by_preferred = _any_of((p.preference for p in preferred), node_pools) if preferred else None
    pod_affinity = placement.affinity.pod_affinity if placement.affinity else None
    co_located = pod_affinity is not None and bool(
        pod_affinity.required_during_scheduling_ignored_during_execution
        or pod_affinity.preferred_during_scheduling_ignored_during_execution
    )
    placed = by_selector.both(by_required)
    fields = [
        field
        for field, selection in ((FIELD_NODE_SELECTOR, by_selector), (FIELD_REQUIRED, by_required))
        if selection.selects
    ]
    pools = placed.pools
    if not placed.selects and by_preferred is not None and by_preferred.selects:
        # A preference does not bind the scheduler, but says where the pod means to go.
        pools = pools & by_preferred.pools
        fields.append(FIELD_PREFERRED)
    if co_located:
        fields.append(FIELD_POD_AFFINITY)  # beside another pod, on whichever node it is
    if not fields:
        return PodReach(NO_POOL)
    reach = pools & tolerated_pools(placement)
    return PodReach(reach, (*fields, "spec.tolerations")) if not reach.empty else PodReach(NO_POOL)
