"""The control API's request fields: each read from a JSON body or a query string, or a
`BadField` naming the field and what it must be (answered as HTTP 400 by `server`)."""

from __future__ import annotations

import json
from typing import Any

from werkzeug.wrappers import Request


class BadField(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadField(name, f"{name} must be a number (epoch seconds)")
    return float(value)


def query_number(query: dict[str, Any], name: str) -> float | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadField(name, f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise BadField(name, f"{name} must be >= 0, got {raw!r}")
    return value


def json_body(request: Request) -> dict[str, Any]:
    raw = request.get_data(as_text=True)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise BadField("body", f"the body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadField("body", "the body must be a JSON object")
    return body


def string(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadField(name, f"{name} is required and must be a non-empty string")
    return value


def opt_string(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadField(name, f"{name} must be a string")
    return value


def integer(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadField(name, f"{name} is required and must be an integer")
    return value


def opt_integer(body: dict[str, Any], name: str) -> int | None:
    return None if body.get(name) is None else integer(body, name)


def string_list(body: dict[str, Any], name: str) -> tuple[str, ...]:
    value = body.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadField(name, f"{name} must be a list of strings")
    return tuple(value)


def after(query: dict[str, Any]) -> int:
    """A log's ``after=N`` query argument (0 when absent)."""
    value = query.get("after")
    if value is not None and not str(value).isdigit():
        raise BadField("after", "after must be a non-negative integer")
    return int(value or 0)


def string_map(body: dict[str, Any], name: str) -> dict[str, str]:
    value = body.get(name) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadField(name, f'{name} must be an object of strings, such as {{"team": "a"}}')
    return dict(value)
