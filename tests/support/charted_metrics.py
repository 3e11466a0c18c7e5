"""The metric names the chart's dashboard and alerts query, read from their PromQL.

A name is an identifier in an expression that is not a function (followed by ``(``), a
keyword, a label (inside ``{...}`` or a ``by``/``without``/``on``/``ignoring`` list), a
range or a string. A histogram's ``_bucket``/``_count``/``_sum`` and a counter's ``_total``
stay as written: they are the series names a scrape carries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHART = Path(__file__).resolve().parents[2] / "charts" / "atomic-gang-provisioner"
DASHBOARD = CHART / "dashboards" / "atomic-gang.json"

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Every metric an expression reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        name, rest = match.group(0), text[match.end() :].lstrip()
        if rest.startswith("(") or name.lower() in _KEYWORDS:
            continue
        if match.start() > 0 and (
            text[match.start() - 1].isdigit() or text[match.start() - 1] == "."
        ):
            continue  # an exponent or a unit inside a number (1e3)
        names.add(name)
    return names


def dashboard_exprs(dashboard: dict[str, Any] | None = None) -> list[str]:
    board = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def rule_exprs(documents: Iterable[dict[str, Any]]) -> list[str]:
    """The expressions of every rule of every rendered PrometheusRule."""
    return [
        str(rule["expr"])
        for doc in documents
        if doc and doc.get("kind") == "PrometheusRule"
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
    ]
