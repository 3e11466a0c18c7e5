"""Which pools' nodes a Pod can run on (`api.pod_reach`): tolerations, selectors, node
names, table-driven; and the pool-set algebra the rule rests on."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.pod_reach import (
    EVERY_POOL,
    NO_POOL,
    PodPlacement,
    PoolSet,
    named_nodes,
    pod_reach,
    tolerated_pools,
)

pytestmark = pytest.mark.unit

POOL, GROUP, TAINT = c.POOL_LABEL, c.GROUP_LABEL, c.GANG_TAINT_KEY
EVERYTHING = {"operator": "Exists"}
GANG_KEY = {"key": TAINT, "operator": "Exists"}
POOL_A = {"key": TAINT, "operator": "Equal", "value": "a", "effect": "NoSchedule"}
# Node names and the pool each belongs to, as the webhook reads them (None: no pool).
NODES: dict[str, str | None] = {"ip-a-1": "a", "ip-a-2": "a", "ip-b-1": "b", "ip-plain": None}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}  # fmt: skip


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def on_node(name: str) -> dict[str, Any]:
    # What the DaemonSet controller writes on each of its pods.
    return {"matchFields": [expr("metadata.name", "In", name)]}


def placement(tolerations: tuple[dict[str, Any], ...] = (), **spec: Any) -> PodPlacement:
    return PodPlacement.model_validate({"tolerations": list(tolerations), **spec})


def reach(tolerations: tuple[dict[str, Any], ...] = (), **spec: Any) -> PoolSet:
    return pod_reach(placement(tolerations, **spec), NODES).pools


@pytest.mark.parametrize(
    ("tolerations", "spec", "expected"),
    [
        # Tolerates everything and selects pool a: by nodeSelector, affinity, nodeName.
        ((EVERYTHING,), {"nodeSelector": {POOL: "a"}}, PoolSet.of(["a"])),
        ((EVERYTHING,), {"affinity": required({"matchExpressions": [expr(POOL, "In", "a")]})},
         PoolSet.of(["a"])),
        ((EVERYTHING,), {"affinity": required(on_node("ip-a-1"))}, PoolSet.of(["a"])),
        ((), {"nodeName": "ip-a-1"}, PoolSet.of(["a"])),  # the kubelet ignores NoSchedule
        # The taint tolerated by key, and by key and value.
        ((GANG_KEY,), {"nodeSelector": {POOL: "a"}}, PoolSet.of(["a"])),
        ((POOL_A,), {"nodeSelector": {POOL: "a"}}, PoolSet.of(["a"])),
        ((POOL_A,), {"nodeSelector": {POOL: "b"}}, NO_POOL),  # b's taint not tolerated
        # Selects gang nodes but tolerates no gang taint: the scheduler keeps it off.
        ((), {"nodeSelector": {POOL: "a"}}, NO_POOL),
        (({"key": TAINT, "operator": "Exists", "effect": "NoExecute"},),
         {"nodeSelector": {POOL: "a"}}, NO_POOL),
        (({"key": "other", "operator": "Exists"},), {"nodeSelector": {POOL: "a"}}, NO_POOL),
        # Tolerates everything but selects no gang node: the rule's documented limit.
        ((EVERYTHING,), {}, NO_POOL),
        ((EVERYTHING,), {"nodeSelector": {"kubernetes.io/os": "linux"}}, NO_POOL),
        ((EVERYTHING,), {"affinity": required(on_node("ip-plain"))}, NO_POOL),
        ((EVERYTHING,), {"nodeName": "ip-plain"}, NO_POOL),
        ((EVERYTHING,), {"nodeName": "ip-gone"}, NO_POOL),
        ((EVERYTHING,), {"affinity": required({"matchExpressions": [expr(POOL, "DoesNotExist")]})},
         NO_POOL),
        ((EVERYTHING,), {"affinity": required({"matchExpressions": [expr(POOL, "NotIn", "a")]})},
         NO_POOL),
        # The group label alone: group names repeat across pools, so any pool.
        ((EVERYTHING,), {"nodeSelector": {GROUP: "gen-1"}}, EVERY_POOL),
        ((POOL_A,), {"nodeSelector": {GROUP: "gen-1"}}, PoolSet.of(["a"])),
        ((EVERYTHING,), {"affinity": required({"matchExpressions": [expr(POOL, "Exists")]})},
         EVERY_POOL),
        # Terms are ORed, expressions ANDed, nodeSelector ANDed with the affinity.
        ((EVERYTHING,), {"affinity": required(
            {"matchExpressions": [expr(POOL, "In", "a")]},
            {"matchExpressions": [expr(POOL, "In", "b")]})}, PoolSet.of(["a", "b"])),
        ((EVERYTHING,), {"affinity": required(on_node("ip-a-1"), on_node("ip-b-1"))},
         PoolSet.of(["a", "b"])),
        ((EVERYTHING,), {"affinity": required(
            {"matchExpressions": [expr(POOL, "In", "a", "b"), expr(POOL, "NotIn", "b")]})},
         PoolSet.of(["a"])),
        ((EVERYTHING,), {"nodeSelector": {POOL: "a"}, "affinity": required(
            {"matchExpressions": [expr(POOL, "In", "b")]},
            {"matchExpressions": [expr("kubernetes.io/os", "In", "linux")]})},
         PoolSet.of(["a"])),  # the second term lets the selector's pool through
        ((EVERYTHING,), {"nodeSelector": {POOL: "a"},
                         "affinity": required({"matchExpressions": [expr(POOL, "In", "b")]})},
         NO_POOL),  # no node is of both
        # A preference says where the pod means to go; a pod affinity, beside whom.
        ((EVERYTHING,), {"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [expr(POOL, "In", "b")]}}]}}},
         PoolSet.of(["b"])),
        ((EVERYTHING,), {"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"job-name": "x"}},
                 "topologyKey": "kubernetes.io/hostname"}]}}}, EVERY_POOL),
        ((POOL_A,), {"affinity": {"podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}},
         PoolSet.of(["a"])),
    ],
)  # fmt: skip
def test_the_pools_a_pod_can_run_on(
    tolerations: tuple[dict[str, Any], ...], spec: dict[str, Any], expected: PoolSet
) -> None:
    assert reach(tolerations, **spec) == expected


def test_a_reach_names_the_fields_that_take_the_pod_there() -> None:
    out = pod_reach(placement((EVERYTHING,), nodeSelector={POOL: "a"}), NODES)
    assert out.fields == ("spec.nodeSelector", "spec.tolerations")
    out = pod_reach(placement(nodeName="ip-b-1"), NODES)
    assert out.fields == ("spec.nodeName",)
    assert pod_reach(placement((EVERYTHING,)), NODES).fields == ()


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        (EVERYTHING, EVERY_POOL),
        ({"operator": "Exists", "effect": "NoSchedule"}, EVERY_POOL),
        ({"operator": "Exists", "effect": "NoExecute"}, NO_POOL),
        (GANG_KEY, EVERY_POOL),
        (POOL_A, PoolSet.of(["a"])),
        ({"key": TAINT, "value": "a"}, PoolSet.of(["a"])),  # operator defaults to Equal
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, NO_POOL),
        ({"key": "CriticalAddonsOnly", "operator": "Exists"}, NO_POOL),
    ],
)
def test_which_gang_taints_a_toleration_tolerates(
    toleration: dict[str, Any], expected: PoolSet
) -> None:
    assert tolerated_pools(placement((toleration,))) == expected


def test_named_nodes_are_the_node_name_and_the_name_field_selectors() -> None:
    spec = placement((EVERYTHING,), affinity=required(on_node("ip-a-1"), on_node("ip-b-1")))
    assert named_nodes(spec) == {"ip-a-1", "ip-b-1"}
    assert named_nodes(placement(nodeName="ip-a-2")) == {"ip-a-2"}
    assert named_nodes(placement((EVERYTHING,), nodeSelector={POOL: "a"})) == set()


@pytest.mark.parametrize(
    ("left", "right", "both", "either"),
    [
        (PoolSet.of("ab"), PoolSet.of("bc"), PoolSet.of("b"), PoolSet.of("abc")),
        (PoolSet.of("ab"), PoolSet(frozenset("b"), every_but=True), PoolSet.of("a"),
         PoolSet(every_but=True)),
        (PoolSet(frozenset("a"), every_but=True), PoolSet(frozenset("b"), every_but=True),
         PoolSet(frozenset("ab"), every_but=True), EVERY_POOL),
        (NO_POOL, EVERY_POOL, NO_POOL, EVERY_POOL),
    ],
)  # fmt: skip
def test_pool_sets_intersect_and_unite_finite_and_cofinite(
    left: PoolSet, right: PoolSet, both: PoolSet, either: PoolSet
) -> None:
    assert left & right == both == right & left
    assert left | right == either == right | left
    assert (left & right).empty is both.empty
