"""The machine's CPU as the benchmarks read it from /proc/stat: steal is apart from busy."""

from __future__ import annotations

import pytest

from bench.procfs import TICKS, cpu_times

pytestmark = pytest.mark.unit


def test_steal_is_in_the_total_and_not_in_busy() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = "cpu  400 0 100 300 20 0 30 150 0 0\ncpu0 200 0 50 150 10 0 15 75 0 0\n"
    busy, total, stolen = cpu_times(stat)
    assert cpu_times(stat).stolen_percent == pytest.approx(15.0)
    assert total == pytest.approx(1000 / TICKS)
    assert stolen == pytest.approx(150 / TICKS)
    assert busy == pytest.approx((400 + 100 + 30) / TICKS)


def test_a_machine_nothing_was_stolen_from_is_busy_by_what_ran() -> None:
    busy, total, stolen = cpu_times("cpu  400 0 100 300 20 0 30 0 0 0\n")
    assert (
        stolen == 0 and busy == pytest.approx(530 / TICKS) and total == pytest.approx(850 / TICKS)
    )


def test_a_span_is_the_difference_of_two_reads() -> None:
    before = cpu_times("cpu  400 0 100 300 20 0 30 150 0 0\n")
    after = cpu_times("cpu  500 0 100 350 20 0 30 200 0 0\n")
    span = after.since(before)
    assert span.total == pytest.approx(200 / TICKS)
    assert span.busy_percent == pytest.approx(50.0) and span.stolen_percent == pytest.approx(25.0)
