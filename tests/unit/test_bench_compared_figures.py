"""The figures two benches print beside their recorded baselines: `bench_stack_ops`' per
mode and operation (the median of each call's wall time, CPU, CLI processes and S3/KMS
requests, and one pool's life counted as the printed line counts it: two records a round),
and `bench_launch_reads`' per shape and pass (reads, repeated reads, writes)."""

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


def test_launch_reads_figures_total_each_pass_as_its_report_does() -> None:
    from bench.bench_launch_reads import key_figures

    counted = {
        "plain": {
            "launch": Counter(
                {"ec2:DescribeInstances": 2, "ec2:DescribeSubnets": 1, "ec2:RunInstances": 1}
            ),
            "warm claim": Counter(),
        }
    }
    figures = key_figures(counted)
    assert figures["plain launch pass: reads"] == 3
    assert figures["plain launch pass: reads again"] == 1  # DescribeInstances twice
    assert figures["plain launch pass: writes"] == 1
    assert figures["plain warm claim pass: reads"] == 0


def test_reaper_figures_name_each_fleet_and_step() -> None:
    from bench.bench_reaper import ROWS, key_figures

    steps = {key: float(i) for i, (_, key) in enumerate(ROWS)}
    figures = key_figures(
        {
            1000: {**steps, "released": 400.0, "left": 600.0},
            10000: {**steps, "sweep": 9.0, "released": 4000.0, "left": 6000.0},
        }
    )
    assert figures["1,000 instances: sweep s"] == steps["sweep"]
    assert figures["10,000 instances: sweep s"] == 9.0
    assert figures["10,000 instances: released"] == 4000.0
    assert "1,000 instances: left s" not in figures  # a count, not a time
    assert len(figures) == 2 * (len(ROWS) + 2)
