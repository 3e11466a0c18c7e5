"""`atomic-gang pools`: joining GangNodePools with stacks, and the table (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.commands.pools import PoolRow, build_rows, render, render_table
from provisioner.pulumi_driver.oplog import StackOperation
from provisioner.pulumi_driver.reports import StackSummary

pytestmark = pytest.mark.unit

T = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
WIDE = ("team-a", "p5.48xlarge", "2")  # the wide columns NAMESPACE, TYPE, COUNT


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
    spec = {"ownerNamespace": "team-a", "instanceType": "p5.48xlarge", "count": 2}
    status = {"phase": phase, "instanceIds": ids, "readyNodes": len(ids), **status}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


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
            *WIDE,
            "2",
        ),
        PoolRow("b", "Acquiring", ("i-9",), "2 pending operation(s)", "prepare failed", *WIDE, "1"),
        PoolRow("c", "Idle", (), "none", "-", *WIDE, "0"),
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


def test_stacks_that_could_not_be_read_are_unknown_not_none() -> None:
    rows = build_rows([], {}, {}, [_pool("a", "KeepWarm", ["i-1"])], stacks_read=False)
    assert [r.stack for r in rows] == ["unknown"]
    # Read, and absent: the pool has no stack.
    rows = build_rows([], {}, {}, [_pool("a", "KeepWarm", ["i-1"])])
    assert [r.stack for r in rows] == ["none"]


def test_wide_adds_namespace_type_count_and_ready() -> None:
    rows = build_rows([_stack("a")], {"a": None}, {}, [_pool("a", "Satisfied", ["i-1", "i-2"])])
    table = render(rows, "wide").splitlines()
    assert table[0].split()[-4:] == ["NAMESPACE", "TYPE", "COUNT", "READY"]
    assert table[1].split()[-4:] == ["team-a", "p5.48xlarge", "2", "2"]
    assert "NAMESPACE" not in render(rows, "table")


def test_json_and_yaml_hold_the_same_rows() -> None:
    import json

    import yaml

    rows = build_rows([_stack("a")], {"a": None}, {}, [_pool("a", "Satisfied", ["i-1"])])
    as_json = json.loads(render(rows, "json"))
    assert yaml.safe_load(render(rows, "yaml")) == as_json
    assert as_json[0]["namespace"] == "team-a" and as_json[0]["instances"] == ["i-1"]
