"""Kubernetes' taint and toleration rules (`devenv.node_match`), table-driven: what the pod
simulator (the scheduler's part) and the device-plugin model (the DaemonSet controller's
part) both decide by. Each row is one rule of `Toleration.ToleratesTaint` and the taint
docs (concepts/scheduling-eviction/taint-and-toleration)."""

from __future__ import annotations

from typing import Any

import pytest

from devenv.node_match import selector_matches, tolerates, untolerated
from provisioner.api import constants as c

GANG = {"key": c.GANG_TAINT_KEY, "value": "pool-a", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
EXECUTE = {"key": "dedicated", "value": "ml", "effect": "NoExecute"}


def _required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        # Exists with an empty key tolerates every taint, whatever the effect...
        ({"operator": "Exists"}, GANG, True),
        ({"operator": "Exists"}, EXECUTE, True),
        # ...and with an effect, only taints of that effect.
        ({"operator": "Exists", "effect": "NoSchedule"}, EXECUTE, False),
        # Exists with a key: any value of that key.
        ({"key": c.GANG_TAINT_KEY, "operator": "Exists"}, GANG, True),
        ({"key": c.GANG_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}, GANG, True),
        ({"key": c.GANG_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}, GANG, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GANG, False),
        # Equal (the default operator) needs the key and the value.
        ({"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": "pool-a"}, GANG, True),
        ({"key": c.GANG_TAINT_KEY, "value": "pool-a"}, GANG, True),
        ({"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": "pool-b"}, GANG, False),
        ({"key": c.GANG_TAINT_KEY, "operator": "Equal"}, GANG, False),
        # An empty effect matches every effect.
        ({"key": "dedicated", "operator": "Equal", "value": "ml"}, EXECUTE, True),
        ({"key": "dedicated", "value": "ml", "effect": "NoSchedule"}, EXECUTE, False),
        # The NVIDIA chart's defaults tolerate their own taints, not the gang's.
        ({"key": "CriticalAddonsOnly", "operator": "Exists"}, GANG, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU, True),
    ],
)
def test_a_toleration_tolerates_a_taint_by_the_kubernetes_rules(
    toleration: dict[str, Any], taint: dict[str, Any], expected: bool
) -> None:
    assert tolerates([toleration], taint) is expected


GPU_ANY = {"key": "nvidia.com/gpu", "operator": "Exists"}
GANG_ANY = {"key": c.GANG_TAINT_KEY, "operator": "Exists"}


@pytest.mark.parametrize(
    ("tolerations", "taints", "left"),
    [
        ([], [], []),
        ([], [GANG], [GANG]),
        # PreferNoSchedule never keeps a pod off.
        ([], [{**GANG, "effect": "PreferNoSchedule"}], []),
        # Every blocking taint must be tolerated, each by some toleration.
        ([GPU_ANY], [GANG, GPU], [GANG]),
        ([GPU_ANY, GANG_ANY], [GANG, GPU], []),
        ([{"operator": "Exists"}], [GANG, GPU, EXECUTE], []),
    ],
)
def test_untolerated_lists_the_blocking_taints_no_toleration_covers(
    tolerations: list[dict[str, Any]], taints: list[dict[str, Any]], left: list[dict[str, Any]]
) -> None:
    assert untolerated(tolerations, taints) == left


IN_X = {"key": "t", "operator": "In", "values": ["x"]}
IN_Y = {"key": "t", "operator": "In", "values": ["y"]}
HAS_GPU = {"key": "gpu", "operator": "Exists"}


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({}, {}, True),
        ({"nodeSelector": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"nodeSelector": {"a": "1"}}, {"a": "2"}, False),
        # Any term of the required affinity, with every expression of that term.
        (_required([IN_X], [IN_Y]), {"t": "y"}, True),
        (_required([IN_Y, HAS_GPU]), {"t": "y"}, False),
        (_required([IN_Y, HAS_GPU]), {"t": "y", "gpu": "1"}, True),
        ({"nodeSelector": {"a": "1"}, **_required([IN_Y])}, {"t": "y"}, False),
    ],
)
def test_node_selector_and_required_affinity_must_both_match(
    spec: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(spec, labels) is expected
