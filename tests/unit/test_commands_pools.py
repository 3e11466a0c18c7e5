"""`atomic-gang pools`: joining GangNodePools with stacks, and the table (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.commands.pools import PoolRow, build_rows, render_table
from provisioner.pulumi_driver.oplog import StackOperation
from provisioner.pulumi_driver.reports import StackSummary

pytestmark = pytest.mark.unit

T = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@dataclass
class _Outputs:
    instance_ids: tuple[str, ...]


def _stack(name: str, **kw: Any) -> StackSummary:
    values: dict[str, Any] = {
        "name": name,
        "resource_count": 6,
        "last_update": T,
        "locked": False,
        "pending_operations": 0,
    }
    values.update(kw)
    return StackSummary(**values)


def _pool(name: str, phase: str, ids: list[str], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, "instanceIds": ids, **status}}


def test_rows_join_pools_and_stacks_both_ways() -> None:
    recorded = StackOperation("a", "record", T, "h", 1, T, "succeeded")
    rows = build_rows(
        stacks=[_stack("a"), _stack("orphan", locked=True), _stack("b", pending_operations=2)],
        outputs={"a": _Outputs(("i-1", "i-2")), "orphan": None, "b": _Outputs(())},
        last_operations={"a": recorded},
        gang_node_pools=[
            _pool("a", "Satisfied", ["i-1", "i-2"]),
            _pool(
                "b", "Acquiring", ["i-9"], lastStackOperation="prepare", lastStackResult="failed"
            ),
            _pool("c", "Idle", []),
        ],
    )

    assert rows == [
        PoolRow(
            "a",
            "Satisfied",
            ("i-1", "i-2"),
            "ok, 6 resources",
            "record succeeded at 2030-01-01T12:00:00Z",
        ),
        PoolRow("b", "Acquiring", ("i-9",), "2 pending operation(s)", "prepare failed"),
        PoolRow("c", "Idle", (), "none", "-"),
        PoolRow("orphan", "-", (), "locked (no GangNodePool)", "-"),
    ]


def test_without_the_cluster_stacks_are_listed_without_judging_them() -> None:
    rows = build_rows([_stack("a")], {"a": None}, {}, None)
    assert rows == [PoolRow("a", "-", (), "ok, 6 resources", "-")]


def test_table_aligns_columns() -> None:
    table = render_table(
        [PoolRow("train", "KeepWarm", ("i-1",), "ok", "-"), PoolRow("b", "Idle", (), "none", "-")]
    ).splitlines()
    assert table[0].split() == ["POOL", "PHASE", "INSTANCES", "STACK", "LAST", "OPERATION"]
    assert table[1].split() == ["train", "KeepWarm", "i-1", "ok", "-"]
    assert table[2].split() == ["b", "Idle", "-", "none", "-"]
    assert table[0].index("PHASE") == table[1].index("KeepWarm") == table[2].index("Idle")
