"""Go-style durations ("10m", "1h30m", "90s", "0s") to and from `timedelta`.

The chart values and Job annotations spell durations the way Go's `time.ParseDuration`
does, so users moving from the reference controller keep their values. `settings`,
`shape` and `gangnodepool` use the `GoDuration` field type (in ``fields``, with the other
pydantic types: this module imports no pydantic, because the stacks' provider host reads
tags through it on every engine run); anything else that reads a duration from a user calls
`parse_duration` and gets a `DurationError` whose message says what was wrong and what is
accepted.

Go keeps nanoseconds; `timedelta` keeps microseconds, so values are rounded to the nearest
microsecond. Nothing this controller times needs more.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction
from typing import Final

__all__ = ["DURATION_HINT", "DurationError", "format_duration", "parse_duration"]

_NS_PER_UNIT: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign, what Go prints
    "μs": 1_000,  # U+03BC Greek mu, which Go also accepts
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
# Go refuses anything that does not fit an int64 count of nanoseconds.
_MAX_NS: Final = 2**63 - 1
_MAX_DIGITS: Final = 20
_NUMBER = re.compile(r"([0-9]*)(?:\.([0-9]*))?", re.ASCII)
_UNIT = re.compile(r"[^0-9.]*")

DURATION_HINT: Final = (
    'a Go duration: numbers with units ns, us, ms, s, m or h, such as "90s", "10m" or "1h30m"'
)


class DurationError(ValueError):
    """A string that Go's time.ParseDuration would refuse; the message says why.

    `problem` is the short cause ("unknown unit 'x'") for callers that phrase their own
    sentence around it.
    """

    def __init__(self, text: object, problem: str) -> None:
        self.problem = problem
        super().__init__(f"{text!r} is not a valid duration ({problem}); use {DURATION_HINT}")


# "DescribeCapacityBlockOfferings" (EC2 API Reference), CapacityDurationHours: "1-day
# increments up 14 days, and in 7-day increments up to 182 days".
BLOCK_DURATION_HOURS: Final = frozenset(
    {d * 24 for d in range(1, 15)} | {w * 168 for w in range(2, 27)}
)
BLOCK_DURATIONS_SOLD: Final = (
    "24h to 336h in steps of 24h (1-14 days), or 504h to 4368h in steps of 168h (3-26 weeks)"
)


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string; raise `DurationError` naming the problem."""
    rest = text
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return timedelta(0)
    if not rest:
        raise DurationError(text, "it is empty")
    total = Fraction(0)
    while rest:
        number = _NUMBER.match(rest)
        assert number is not None  # the pattern matches the empty string
        whole, frac = number.group(1), number.group(2) or ""
        if not whole and not frac:
            raise DurationError(text, f"expected a number at {rest!r}")
        if len(whole) > _MAX_DIGITS:
            raise DurationError(text, "out of range: durations stop at about 292 years")
        rest = rest[number.end() :]
        unit_match = _UNIT.match(rest)
        assert unit_match is not None  # the pattern matches the empty string
        unit = unit_match.group(0)
        if not unit:
            raise DurationError(text, f"no unit after {number.group(0)!r}")
        if unit not in _NS_PER_UNIT:
            raise DurationError(text, f"unknown unit {unit!r}")
        rest = rest[len(unit) :]
        # Digits past the 18th are below a nanosecond even for hours, so Go drops them too.
        frac = frac[:_MAX_DIGITS]
        value = Fraction(int(whole or "0")) + Fraction(int(frac or "0"), 10 ** len(frac))
        total += value * _NS_PER_UNIT[unit]
        if total > _MAX_NS:
            raise DurationError(text, "out of range: durations stop at about 292 years")
    return timedelta(microseconds=sign * round(total / 1000))


def _fraction_digits(whole: int, remainder: int, width: int) -> str:
    digits = f"{remainder:0{width}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(value: timedelta) -> str:
    """Render like Go's Duration.String(): "10m0s", "1h30m0s", "1.5s", "250ms", "0s"."""
    ns = ((value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds) * 1000
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        if ns < 1_000:
            return f"{sign}{ns}ns"
        if ns < 1_000_000:
            return f"{sign}{_fraction_digits(ns // 1_000, ns % 1_000, 3)}µs"
        return f"{sign}{_fraction_digits(ns // 1_000_000, ns % 1_000_000, 6)}ms"
    seconds, sub = divmod(ns, 1_000_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    out = f"{_fraction_digits(seconds, sub, 9)}s"
    if hours or minutes:
        out = f"{minutes}m{out}"
    if hours:
        out = f"{hours}h{out}"
    return sign + out
