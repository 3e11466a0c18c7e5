"""`bench_stack_ops`' compared figures: per mode and operation the median of each call's
wall time, CPU, CLI processes and S3/KMS requests, and one pool's life, counted as the
printed line counts it (two records a round)."""

from __future__ import annotations

from collections import Counter
from typing import cast

import pytest

from bench.bench_stack_ops import CountingCli, Recorder


def _recorder() -> Recorder:
    rec = Recorder(cast(CountingCli, None), Counter)
    calls = {
        # name: (walls, CPU, CLI processes, S3 requests per call)
        "prepare (create)": ([0.4, 0.6, 0.5], [0.3, 0.3, 0.4], [2, 2, 3], [37, 41, 37]),
        "record": ([0.3, 0.2], [0.2, 0.2], [1, 1], [19, 19]),
        "remove (release set)": ([0.3], [0.25], [1], [19]),
        "destroy": ([0.5], [0.2], [1], [58]),
    }
    for name, (walls, cpu, procs, s3) in calls.items():
        rec.walls[name], rec.cpu[name], rec.procs[name] = walls, cpu, procs
        rec.requests[name] = [Counter({"s3": n, "kms": 2}) for n in s3]
    return rec


def test_each_operation_gives_its_medians_under_its_mode() -> None:
    figures = _recorder().figures("s3/shared")
    assert figures["s3/shared prepare (create): wall s"] == pytest.approx(0.5)
    assert figures["s3/shared prepare (create): child CPU s"] == pytest.approx(0.3)
    assert figures["s3/shared prepare (create): CLI processes"] == 2
    assert figures["s3/shared prepare (create): S3 requests"] == 37
    assert figures["s3/shared destroy: KMS requests"] == 2
    assert figures["s3/shared record: wall s"] == pytest.approx(0.25)


def test_a_pool_life_counts_two_records_and_needs_every_step() -> None:
    rec = _recorder()
    figures = rec.figures("file/shared")
    # prepare 2 + record 1 x2 + remove 1 + destroy 1
    assert figures["file/shared pool lifecycle: CLI processes"] == 6
    assert figures["file/shared pool lifecycle: child CPU s"] == pytest.approx(
        0.3 + 2 * 0.2 + 0.25 + 0.2
    )
    del rec.walls["destroy"]
    assert "file/shared pool lifecycle: CLI processes" not in rec.figures("file/shared")
