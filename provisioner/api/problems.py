"""The one error a gang Job's labels and annotations can raise, and its parts.

    ValueError
     └── GangShapeError      .problems: tuple[Problem, ...], .reason: str

`shape_rules` creates the problems; the Workload reconciler puts `str(error)` in the
admission check's message and `error.reason` in its reason. Each `Problem` names the key,
the value it held and what would be accepted, so its message is a sentence a user can act
on without reading this code. The machine reasons are `constants.REASON_*`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from pydantic import BaseModel, ConfigDict

from provisioner.api import constants as c

__all__ = ["GangShapeError", "Problem", "show_value"]

_MAX_SHOWN: Final = 80


def show_value(value: str) -> str:
    """A value quoted for a message: JSON quoting keeps control characters visible and the
    message on one line; long values are cut."""
    if len(value) > _MAX_SHOWN:
        value = value[:_MAX_SHOWN] + "…"
    return json.dumps(value, ensure_ascii=False)


class Problem(BaseModel):
    """One refusal: which key, what it held (None when unset), why, and what would do."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str | None
    reason: str
    detail: str
    accepted: str
    is_label: bool = False
    # Where a value the Job did not write came from: "GangClass gpu (spec.instanceType)".
    origin: str | None = None

    @property
    def message(self) -> str:
        kind = "Label" if self.is_label else "Annotation"
        if self.origin is not None and self.value is not None:
            shown = show_value(self.value)
            return f"{self.origin} sets {self.key} to {shown}: {self.detail}. Use {self.accepted}."
        if self.value is None:
            return f"{kind} {self.key} is not set: {self.detail}. Set it to {self.accepted}."
        shown = show_value(self.value)
        return f"{kind} {self.key} is {shown}: {self.detail}. Use {self.accepted}."


class GangShapeError(ValueError):
    """A Job's gang shape was refused; `problems` lists every reason, in annotation order."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(" ".join(p.message for p in self.problems))

    @property
    def reason(self) -> str:
        """The problems' shared reason, or InvalidGangShape when they differ."""
        reasons = {p.reason for p in self.problems}
        return reasons.pop() if len(reasons) == 1 else c.REASON_INVALID_GANG_SHAPE
