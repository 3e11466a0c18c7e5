"""Switches for what EC2's fleet documentation leaves open, one field per question.

Each field names the question and holds the answer the emulator gives; `reset()` (through
`EmulatorState.reset`) returns the defaults. A test sets one answer, then the other, and
shows the product handling both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from devenv.emulator.model import EmulatorInputError

# A reserved-capacity fleet whose named reservations hold fewer than the target:
# "partial" launches what they hold and reports the rest (what "Launch instances into an
# interruptible Capacity Reservation" describes for that reservation type), "none"
# launches nothing. The ODCR case is not documented.
RESERVED_SHORTFALL_ANSWERS: Final = ("partial", "none")


@dataclass
class FleetAnswers:
    reserved_shortfall: str = "partial"

    def set(
        self,
        *,
        reserved_shortfall: str | None = None,
    ) -> None:
        if reserved_shortfall is not None:
            if reserved_shortfall not in RESERVED_SHORTFALL_ANSWERS:
                raise EmulatorInputError(
                    "reserved_shortfall", f"must be one of {RESERVED_SHORTFALL_ANSWERS}"
                )
            self.reserved_shortfall = reserved_shortfall
