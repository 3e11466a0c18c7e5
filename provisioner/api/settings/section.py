"""What every settings section shares: refusing unknown keys, and the chart's spelling.

Each section accepts the chart's camelCase spelling (`clusterName`, `defaults.keepWarmTTL`)
as well as the Python field names; `snake_keys` does the renaming for the loader too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_snake

__all__ = ["Port", "Section", "snake_keys"]

Port = Annotated[int, Field(ge=1, le=65535)]


# Settings whose mapping keys are data, not field names: an installer's tag keys
# ("CostCenter") are sent to AWS exactly as written.
_VERBATIM_KEYS: Final = frozenset({"extra_tags"})


def snake_keys(value: Any) -> Any:
    """Rename mapping keys from the chart's camelCase to field names, all the way down."""
    if isinstance(value, Mapping):
        renamed = {}
        for key, inner in value.items():
            name = to_snake(str(key))
            renamed[name] = inner if name in _VERBATIM_KEYS else snake_keys(inner)
        return renamed
    return value


class Section(BaseModel):
    # Unknown keys are refused: a misspelt setting silently falling back to its default is
    # the kind of mistake that surfaces as a bill.
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _chart_spelling(cls, data: Any) -> Any:
        return snake_keys(data)
