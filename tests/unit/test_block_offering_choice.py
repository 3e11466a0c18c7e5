"""The pure choice among Capacity Block offerings: the earliest start within the fee cap, the
lower fee on a tie, nothing starting by the latest acceptable start -> no choice with the
earliest offering named. Table-driven; plus the duration rule the product checks before
asking EC2."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from provisioner.cloud.block_offerings import (
    ALLOWED_DURATION_HOURS,
    CapacityBlockOffering,
    check_duration_hours,
    choose_offering,
)
from tests.support.block_offerings import offering

pytestmark = pytest.mark.unit

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def offer(name: str, start_min: float, fee: str) -> CapacityBlockOffering:
    return offering(name, NOW + timedelta(minutes=start_min), fee)


@dataclass(frozen=True)
class Case:
    name: str
    offerings: tuple[CapacityBlockOffering, ...]
    max_fee: str | None
    latest_start_min: float | None
    chosen: str | None
    earliest: str | None


# The scene: +40 s over the cap, +5 min under it, +10 min under it and cheaper.
SCENE = (offer("cb-40s", 40 / 60, "900"), offer("cb-5m", 5, "700"), offer("cb-10m", 10, "500"))

CASES = [
    Case(
        "earliest under the cap wins over a cheaper later one",
        SCENE,
        "800",
        None,
        "cb-5m",
        "cb-40s",
    ),
    Case("no cap: the earliest", SCENE, None, None, "cb-40s", "cb-40s"),
    Case("a fee equal to the cap is within it", SCENE, "900", None, "cb-40s", "cb-40s"),
    Case(
        "a tie on start goes to the lower fee",
        (offer("cb-a", 5, "700"), offer("cb-b", 5, "600")),
        "800",
        None,
        "cb-b",
        "cb-b",
    ),
    Case(
        "a tie on start and fee goes to the lower id",
        (offer("cb-b", 5, "600"), offer("cb-a", 5, "600")),
        None,
        None,
        "cb-a",
        "cb-a",
    ),
    Case("the latest start is inclusive", SCENE, "800", 5, "cb-5m", "cb-40s"),
    Case("none under the cap by the latest start", SCENE, "800", 4, None, "cb-40s"),
    Case("none under the cap at all", SCENE, "400", None, None, "cb-40s"),
    Case("nothing offered", (), "800", 60, None, None),
    Case(
        "order of EC2's answer does not matter",
        tuple(reversed(SCENE)),
        "800",
        None,
        "cb-5m",
        "cb-40s",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_choose_offering(case: Case) -> None:
    latest = (
        None if case.latest_start_min is None else NOW + timedelta(minutes=case.latest_start_min)
    )
    choice = choose_offering(
        case.offerings,
        max_fee=None if case.max_fee is None else Decimal(case.max_fee),
        latest_start=latest,
    )
    assert (choice.chosen and choice.chosen.offering_id) == case.chosen
    assert (choice.earliest and choice.earliest.offering_id) == case.earliest


def test_no_choice_names_the_earliest_offering_and_its_fee() -> None:
    choice = choose_offering(SCENE, max_fee=Decimal("800"), latest_start=NOW + timedelta(minutes=4))
    assert choice.chosen is None
    assert "cb-40s" in choice.why and "900 USD" in choice.why and "within 800" in choice.why


@pytest.mark.parametrize("hours", [24, 336, 504, 4368])
def test_durations_ec2_sells(hours: int) -> None:
    assert check_duration_hours(hours) == hours


@pytest.mark.parametrize("hours", [0, 12, 25, 360, 384, 4369, 4536])
def test_durations_ec2_does_not_sell_are_refused_with_the_rule(hours: int) -> None:
    with pytest.raises(ValueError, match=r"1-14 days.*3-26 weeks"):
        check_duration_hours(hours)


def test_the_allowed_durations_are_fourteen_days_then_weeks_to_twenty_six() -> None:
    # 14 days is also 2 weeks: 14 daily durations, then 3 to 26 weeks.
    assert len(ALLOWED_DURATION_HOURS) == 14 + 24
    assert min(ALLOWED_DURATION_HOURS) == 24 and max(ALLOWED_DURATION_HOURS) == 182 * 24
