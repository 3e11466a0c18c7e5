"""The record of what `install()` replaced on moto's classes, so a patch can call the original."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ORIGINALS: dict[str, Any] = {}


def patch(cls: type, name: str, replacement: Callable[..., Any]) -> None:
    # None records an addition (a handler moto lacks) rather than a replacement.
    ORIGINALS[f"{cls.__name__}.{name}"] = getattr(cls, name, None)
    setattr(cls, name, replacement)


def original(cls: type, name: str) -> Any:
    return ORIGINALS[f"{cls.__name__}.{name}"]
