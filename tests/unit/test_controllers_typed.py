"""The reconcilers read typed views: no Kubernetes body is walked in `provisioner/controllers`.

`provisioner.kube` turns API bodies into models at the edge (`kube.cache.TypedCache`, the
typed write helpers in `kube.status`); a reconciler that annotates `dict[str, Any]` or
indexes a body's ``metadata``/``spec``/``status`` has reached past that edge. The import
contract in pyproject.toml keeps the raw informer and client out of `controllers/`; this
check keeps raw bodies out of what is left.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONTROLLERS = Path(__file__).resolve().parents[2] / "provisioner" / "controllers"
# The keys of a Kubernetes body a reconciler must read through a model instead.
BODY_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "status",
        "labels",
        "annotations",
        "resourceVersion",
        "ownerReferences",
        "providerID",
        "conditions",
    }
)
MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})


def _annotates_raw(node: ast.Subscript) -> bool:
    base = node.value
    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
    key = node.slice
    return (
        name in MAPPINGS
        and isinstance(key, ast.Tuple)
        and [ast.unparse(e) for e in key.elts] == ["str", "Any"]
    )


def _reads_body_key(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in BODY_KEYS
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "setdefault", "pop")
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in BODY_KEYS
    )


def raw_body_uses(source: str) -> list[str]:
    """Where `source` annotates a `dict[str, Any]` or reads a body key of a mapping."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if (isinstance(node, ast.Subscript) and _annotates_raw(node)) or _reads_body_key(node)
    ]


def test_no_reconciler_walks_a_kubernetes_body() -> None:
    offenders = {
        path.name: uses
        for path in sorted(CONTROLLERS.glob("*.py"))
        if (uses := raw_body_uses(path.read_text()))
    }
    assert offenders == {}, "read these through the typed views of provisioner.kube"


@pytest.mark.parametrize(
    "violation",
    [
        "def f(pool: dict[str, Any]) -> None: ...",
        "x: Mapping[str, Any] = {}",
        'name = obj["metadata"]["name"]',
        'labels = node.get("metadata", {}).get("labels")',
        'spec = obj.setdefault("spec", {})',
    ],
)
def test_the_check_fails_on_a_raw_body(violation: str) -> None:
    assert raw_body_uses(violation)


def test_the_check_passes_typed_reads() -> None:
    assert not raw_body_uses("name = pool.metadata.name\nx: dict[str, int] = {}\ny = d['other']")
