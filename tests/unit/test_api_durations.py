"""Go-style duration parsing and formatting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel, ValidationError

from provisioner.api.durations import DurationError, format_duration, parse_duration
from provisioner.api.fields import GoDuration

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("4h", timedelta(hours=4)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("1.s", timedelta(seconds=1)),
        ("250ms", timedelta(milliseconds=250)),
        ("7us", timedelta(microseconds=7)),
        ("7µs", timedelta(microseconds=7)),
        ("7μs", timedelta(microseconds=7)),
        ("1500ns", timedelta(microseconds=2)),
        ("-1m", timedelta(minutes=-1)),
        ("+2h", timedelta(hours=2)),
        ("1h0m0s", timedelta(hours=1)),
    ],
)
def test_parse_accepts_go_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "it is empty"),
        ("-", "it is empty"),
        ("10", "no unit after '10'"),
        ("10x", "unknown unit 'x'"),
        ("1H", "unknown unit 'H'"),
        ("1h 30m", "unknown unit 'h '"),
        ("h", "expected a number"),
        (".s", "expected a number"),
        ("1.5.5s", "no unit after '1.5'"),
        ("2562048h", "out of range"),
        ("9" * 40 + "s", "out of range"),
    ],
)
def test_parse_refuses_with_the_cause(text: str, problem: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_duration(text)
    assert problem in err.value.problem
    assert repr(text) in str(err.value)
    assert '"10m"' in str(err.value)  # the accepted form is shown


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(minutes=10), "10m0s"),
        (timedelta(hours=4), "4h0m0s"),
        (timedelta(hours=1, minutes=30), "1h30m0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(microseconds=7), "7µs"),
        (timedelta(days=1), "24h0m0s"),
        (-timedelta(seconds=90), "-1m30s"),
    ],
)
def test_format_matches_go_and_round_trips(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


class _Holder(BaseModel):
    ttl: GoDuration


def test_field_type_reads_strings_and_writes_go_strings() -> None:
    held = _Holder.model_validate({"ttl": "15m"})
    assert held.ttl == timedelta(minutes=15)
    assert held.model_dump(mode="json") == {"ttl": "15m0s"}
    assert held.model_dump() == {"ttl": timedelta(minutes=15)}


@pytest.mark.parametrize("value", [600, 1.5, True, None, "10 minutes"])
def test_field_type_refuses_numbers_and_prose(value: object) -> None:
    with pytest.raises(ValidationError, match="duration"):
        _Holder.model_validate({"ttl": value})
