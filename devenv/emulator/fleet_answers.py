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
# A fleet whose launch template targets a Capacity Reservation by id (not a Capacity
# Block): "ignored" launches as if the template had no target (the fleet reads only Open
# or Target-by-group from a template, "Use Capacity Reservations in EC2 Fleet"),
# "refused" answers InvalidParameterCombination. The page does not say which.
TEMPLATE_TARGET_ANSWERS: Final = ("ignored", "refused")


@dataclass
class FleetAnswers:
    reserved_shortfall: str = "partial"
    template_reservation_target: str = "ignored"

    def set(
        self,
        *,
        reserved_shortfall: str | None = None,
        template_reservation_target: str | None = None,
    ) -> None:
        if reserved_shortfall is not None:
            if reserved_shortfall not in RESERVED_SHORTFALL_ANSWERS:
                raise EmulatorInputError(
                    "reserved_shortfall", f"must be one of {RESERVED_SHORTFALL_ANSWERS}"
                )
            self.reserved_shortfall = reserved_shortfall
        if template_reservation_target is not None:
            if template_reservation_target not in TEMPLATE_TARGET_ANSWERS:
                raise EmulatorInputError(
                    "template_reservation_target", f"must be one of {TEMPLATE_TARGET_ANSWERS}"
                )
            self.template_reservation_target = template_reservation_target
