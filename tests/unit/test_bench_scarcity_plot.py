"""The scarcity picture's counts: what ran and what was stranded, by billing's one definition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.scarcity_plot import counts_over_time
from provisioner.cloud.billing import InstanceLife

pytestmark = pytest.mark.unit

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _life(iid: str, start: float, end: float | None, group: str | None = None) -> InstanceLife:
    return InstanceLife(
        iid,
        group,
        T0 + timedelta(seconds=start),
        None if end is None else T0 + timedelta(seconds=end),
    )


def test_a_partial_set_is_stranded_until_the_gang_is_whole_and_ends_with_the_job() -> None:
    # Two of a gang of 2: `a` waits 100 s for `b`; the job ends at 300.
    lives = [_life("a", 0, None), _life("b", 100, None)]
    running, stranded = counts_over_time(lives, 2, T0, 300, [0, 50, 100, 200, 300])
    assert running == (1, 1, 2, 2, 0)
    assert stranded == (1, 1, 0, 0, 0)


def test_a_rolled_back_generation_is_stranded_while_it_runs_and_generations_are_apart() -> None:
    lives = [_life("a", 0, 50, "g1"), _life("b", 100, None, "g2"), _life("c", 100, None, "g2")]
    running, stranded = counts_over_time(lives, 2, T0, 400, [0, 60, 100])
    assert running == (1, 0, 2)
    assert stranded == (1, 0, 0)
