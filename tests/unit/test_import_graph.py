"""The import-graph figures: each counter fed a graph that breaks its rule once."""

from __future__ import annotations

import pytest

from lint.import_graph import cycles_of, upward_edges

pytestmark = pytest.mark.unit


def test_an_edge_from_a_lower_layer_up_is_counted_and_a_downward_one_is_not() -> None:
    edges = [
        ("provisioner.controllers.pool.plan", "provisioner.api.constants"),  # down: fine
        ("provisioner.cloud.engine", "provisioner.controllers.pool.steps"),  # up
        ("provisioner.kube.client", "provisioner.cloud.types"),  # one layer: fine
        ("provisioner.api.settings", "provisioner.commands.cli"),  # up
    ]
    assert upward_edges(edges) == [edges[1], edges[3]]


def test_a_cycle_is_found_with_every_module_on_it_and_a_chain_is_not() -> None:
    modules = ["a", "b", "c", "d"]
    assert cycles_of(modules, [("a", "b"), ("b", "c"), ("c", "d")]) == []
    assert cycles_of(modules, [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == [["a", "b", "c"]]
