"""The demo's summary table keeps its columns apart whatever the Job and pool names are."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from devenv.demo import _summary
from devenv.demo_observer import Instance, JobRecord
from provisioner.cloud.billing import Bill
from provisioner.cloud.block_bill import BoughtBlock


@dataclass
class _Observed:
    """What `_summary` reads of the demo's Observer, without a cluster behind it."""

    jobs: dict[str, JobRecord]
    bills: dict[str, Bill]
    instances: dict[str, Instance] = field(default_factory=dict)
    blocks: dict[str, BoughtBlock] = field(default_factory=dict)

    def pool_bills(self) -> dict[str, Bill]:
        return self.bills


def _cells(line: str) -> list[str]:
    # Two or more spaces separate columns; a name running into the next column leaves one
    # or none.
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.parametrize(
    ("job", "pool", "fee"),
    [
        ("train-a", "shared", None),
        ("a-rather-long-training-job-name", "team-research-p5-capacity-block", "700"),
    ],
)
def test_each_row_has_every_column_even_for_long_names(
    capsys: pytest.CaptureFixture[str], job: str, pool: str, fee: str | None
) -> None:
    record = JobRecord(name=job, pool=pool, submitted=0.0, ready_at=6.5, launched={"i-1", "i-2"})
    start = datetime(2026, 12, 5, 18, 48, tzinfo=UTC)
    blocks = (
        {pool: BoughtBlock("cr-1", pool, 2, start, start + timedelta(hours=24), Decimal(fee))}
        if fee
        else {}
    )
    observed = _Observed(jobs={job: record}, bills={pool: Bill(120.0, 0.0)}, blocks=blocks)
    stranded = _summary(observed)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    job_row = next(line for line in lines if line.startswith(job))
    bill_row = next(line for line in lines if line.startswith(pool) and "120.0" in line)
    assert _cells(job_row) == [job, pool, "6.5s", "2"]
    # The upfront fee of the block bought for the pool, beside its node-seconds; "-" if none.
    assert _cells(bill_row) == [pool, "120.0", "0.0", f"{fee}.00" if fee else "-"]
    if fee:
        assert f"block cr-1 (pool {pool}, 2 instances, 12-05 18:48 to 12-06 18:48 UTC): " in (
            "\n".join(lines)
        )
    assert stranded == 0.0
