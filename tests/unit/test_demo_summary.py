"""The demo's summary table keeps its columns apart whatever the Job and pool names are."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from devenv.demo import _summary
from devenv.demo_observer import Instance, JobRecord
from provisioner.cloud.billing import Bill


@dataclass
class _Observed:
    """What `_summary` reads of the demo's Observer, without a cluster behind it."""

    jobs: dict[str, JobRecord]
    bills: dict[str, Bill]
    instances: dict[str, Instance] = field(default_factory=dict)

    def pool_bills(self) -> dict[str, Bill]:
        return self.bills


def _cells(line: str) -> list[str]:
    # Two or more spaces separate columns; a name running into the next column leaves one
    # or none.
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.parametrize(
    ("job", "pool"),
    [("train-a", "shared"), ("a-rather-long-training-job-name", "team-research-p5-capacity-block")],
)
def test_each_row_has_every_column_even_for_long_names(
    capsys: pytest.CaptureFixture[str], job: str, pool: str
) -> None:
    record = JobRecord(name=job, pool=pool, submitted=0.0, ready_at=6.5, launched={"i-1", "i-2"})
    observed = _Observed(jobs={job: record}, bills={pool: Bill(120.0, 0.0)})
    stranded = _summary(observed)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    job_row = next(line for line in lines if line.startswith(job))
    bill_row = next(line for line in lines if line.startswith(pool) and "120.0" in line)
    assert _cells(job_row) == [job, pool, "6.5s", "2"]
    assert _cells(bill_row) == [pool, "120.0", "0.0"]
    assert stranded == 0.0
