"""A bench's recorded figures (`bench/baselines.py`): what `--record` keeps, and the lines a
run prints beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import baselines

pytestmark = pytest.mark.unit


def half_second() -> float:
    """A machine whose calibration takes half a second."""
    return 0.5


def test_a_recorded_baseline_names_its_commit_and_machine(tmp_path: Path) -> None:
    path = baselines.record("bench_x", {"start s": 1380.0}, root=tmp_path, calibrate=half_second)
    body = json.loads(path.read_text())
    assert body["bench"] == "bench_x" and body["figures"] == {"start s": 1380.0}
    assert body["commit"] and body["machine"]["cpus"] and body["recorded_at"]


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ({"start s": 1518.0}, "1.10x"),
        ({"start s": 1380.0}, "1.00x"),
        ({"calls": 5.0}, "new"),
    ],
)
def test_a_run_prints_each_figure_beside_the_recorded_one(
    tmp_path: Path, now: dict[str, float], expected: str
) -> None:
    baselines.record("bench_x", {"start s": 1380.0}, root=tmp_path, calibrate=half_second)
    lines = baselines.comparison("bench_x", now, root=tmp_path, calibrate=half_second)
    (row,) = [line for line in lines if line.strip().startswith(next(iter(now)))]
    assert row.rstrip().endswith(expected), lines


def test_a_figure_no_longer_measured_is_named(tmp_path: Path) -> None:
    baselines.record("bench_x", {"start s": 1.0, "gone": 2.0}, root=tmp_path, calibrate=half_second)
    lines = baselines.comparison("bench_x", {"start s": 1.0}, root=tmp_path, calibrate=half_second)
    assert lines[-1].endswith("gone")


def test_figures_not_measured_are_counted_by_series_and_the_others_named(tmp_path: Path) -> None:
    recorded = {"warm: p50 s": 1.0, "warm: writes": 2.0, "cold: p50 s": 3.0, "a / b": 4.0}
    baselines.record("bench_x", recorded, root=tmp_path, calibrate=half_second)
    now = {"warm: p50 s": 1.0}
    lines = baselines.comparison("bench_x", now, root=tmp_path, calibrate=half_second)
    assert lines[-1] == "  recorded but not measured now: cold (1), warm (1), a / b"


def test_a_run_prints_its_machine_beside_the_baselines(tmp_path: Path) -> None:
    """A machine twice as slow shows as 2.00x on the calibration line, so a 2x figure
    beside it reads as the machine, not the code."""
    baselines.record("bench_x", {"start s": 1.0}, root=tmp_path, calibrate=half_second)
    lines = baselines.comparison("bench_x", {"start s": 2.0}, root=tmp_path, calibrate=lambda: 1.0)
    assert "1.00s here, 0.50s when recorded, 2.00x" in lines[1], lines
    body = json.loads(baselines.path_of("bench_x", tmp_path).read_text())
    assert body["machine"]["calibration_s"] == 0.5


def test_a_baseline_from_before_calibration_says_its_ratios_compare_machines(
    tmp_path: Path,
) -> None:
    path = baselines.record("bench_x", {"a": 1.0}, root=tmp_path, calibrate=half_second)
    body = json.loads(path.read_text())
    del body["machine"]["calibration_s"]
    path.write_text(json.dumps(body))
    lines = baselines.comparison("bench_x", {"a": 1.0}, root=tmp_path, calibrate=half_second)
    assert "kept none" in lines[1] and "compare machines as well as code" in lines[1]


def test_the_calibration_times_real_work() -> None:
    assert 0.0 < baselines.calibration_seconds(repeats=1) < 60.0


@pytest.mark.parametrize(
    ("steal", "refused"), [(None, False), (0.0, False), (10.0, False), (10.5, True), (40.0, True)]
)
def test_a_run_the_hypervisor_starved_is_not_kept_as_the_baseline(
    steal: float | None, refused: bool
) -> None:
    why = baselines.refusal(steal)
    assert (why is not None) == refused
    if why is not None:
        assert f"{steal:.0f} % of the cores" in why and "quieter" in why


def test_a_bench_ends_by_comparing_and_records_only_when_asked_and_not_starved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def end(record_run: bool, steal: float | None) -> str:
        baselines.compare_and_record(
            "bench_z",
            {"a": 2.0},
            record_run=record_run,
            ran_on="abc1234",
            steal_percent=steal,
            root=tmp_path,
            calibrate=half_second,
        )
        return capsys.readouterr().out

    assert "No baseline recorded for bench_z" in end(False, None)
    assert not baselines.path_of("bench_z", tmp_path).exists()
    assert "Not recorded as the baseline" in end(True, 50.0)  # starved: refused
    assert not baselines.path_of("bench_z", tmp_path).exists()
    assert "Recorded as the baseline" in end(True, None)  # steal not measured: kept
    assert baselines.load("bench_z", tmp_path)["commit"] == "abc1234"
    assert "Against the baseline recorded at abc1234" in end(False, 0.0)


def test_without_a_baseline_the_run_says_how_to_keep_one(tmp_path: Path) -> None:
    (line,) = baselines.comparison("bench_y", {"a": 1.0}, root=tmp_path)
    assert "--record" in line


def test_the_admission_bench_compares_its_p50s_ratios_and_cold_steps() -> None:
    from bench.bench_admission import key_figures

    def sample(admission: float, raw: float, **steps: float) -> dict[str, float]:
        return {"admission": admission, "raw": raw, **steps}

    figures = key_figures(
        {
            "baseline": [sample(0.2, 0.2), sample(0.4, 0.4)],
            "warm": [sample(0.3, 0.3, quotaToClaimed=0.05)],
            "floor": [sample(0.5, 0.5)],
            "early": [sample(0.24, 0.24)],
            "cold": [
                sample(1.5, 2.5, acquiringToPrepared=0.9, quota=0.1),
                sample(2.5, 3.5, quota=0.1),
            ],
            "cold-queued": [sample(0.6, 1.6, quota=0.0)],
            "cold-instant": [sample(0.8, 0.9, quota=0.1)],
            "cold-slow": [sample(2.0, 62.0)],
        }
    )
    assert figures["baseline: p50 s"] == pytest.approx(0.3)
    assert figures["warm p50 / baseline p50"] == pytest.approx(1.0)
    assert figures["cold p50 / baseline p50"] == pytest.approx(2.0 / 0.3)
    assert figures["early p50 / baseline p50"] == pytest.approx(0.8)
    assert figures["warm p50 / floor p50"] == pytest.approx(0.6)
    assert figures["warm p50 / early p50"] == pytest.approx(1.25)
    assert figures["cold acquiringToPrepared: p50 s"] == pytest.approx(0.9)
    assert figures["warm quotaToClaimed: p50 s"] == pytest.approx(0.05)
    assert figures["cold-slow: controller's share"] == pytest.approx(2.0 / 62.0)
    assert figures["cold: p50 after quota s"] == pytest.approx(1.9)
    assert figures["cold-queued: p50 after quota s"] == pytest.approx(0.6)
    assert figures["cold-instant: p50 s"] == pytest.approx(0.8)
    assert figures["cold-instant: raw p50 s"] == pytest.approx(0.9)
    assert figures["cold-instant: p50 after quota s"] == pytest.approx(0.7)
    assert "cold preparedToJoining: p50 s" not in figures  # no sample measured it
    assert "warm p50 / baseline p50" not in key_figures({"warm": [sample(0.3, 0.3)]})


def test_the_scale_bench_compares_its_must_show_figures_by_size() -> None:
    from bench.bench_scale import key_figures

    figures = key_figures(
        200,
        {
            "warmWaveSeconds": 23.0,
            "kueueAloneWaveSeconds": 20.0,
            "coldWaveSeconds": 118.0,
            "laggangnodepoolP99": 0.8,
            "peakRssMiB": 290.0,
        },
    )
    assert figures["200 pools: warm wave / Kueue alone"] == pytest.approx(1.15)
    assert figures["200 pools: cold wave s"] == 118.0
    assert figures["200 pools: pool lag p99 s"] == 0.8
    assert "200 pools: release of every pool s" not in figures  # not measured
    assert "200 pools: warm wave / floor wave" not in figures  # no floor wave run
    assert next(iter(key_figures(1000, {"peakRssMiB": 1.0}))).startswith("1000 pools:")


def test_the_scale_bench_puts_the_warm_wave_beside_the_admission_check_floor() -> None:
    from bench.bench_scale import key_figures

    figures = key_figures(
        200,
        {
            "warmWaveSeconds": 30.0,
            "kueueAloneWaveSeconds": 20.0,
            "floorWaveSeconds": 25.0,
            "earlyWaveSeconds": 21.0,
        },
    )
    assert figures["200 pools: AdmissionCheck floor wave s"] == 25.0
    assert figures["200 pools: check Ready before quota wave / Kueue alone"] == pytest.approx(1.05)
    assert figures["200 pools: floor wave / Kueue alone"] == pytest.approx(1.25)
    assert figures["200 pools: warm wave / floor wave"] == pytest.approx(1.2)
    assert "200 pools: warm / floor, Jobs done" not in figures  # not measured


def test_the_scale_bench_compares_each_wave_to_its_last_job_finished() -> None:
    from bench.bench_scale import key_figures

    figures = key_figures(
        200,
        {
            "warmWaveSeconds": 30.0,
            "warmWaveJobsSeconds": 26.0,
            "kueueAloneWaveJobsSeconds": 20.0,
            "floorWaveJobsSeconds": 25.0,
        },
    )
    assert figures["200 pools: warm / Kueue alone, Jobs done"] == pytest.approx(1.3)
    assert figures["200 pools: warm / floor, Jobs done"] == pytest.approx(1.04)


def test_a_record_keeps_the_other_sizes_of_its_own_machine_only(tmp_path: Path) -> None:
    baselines.record(
        "bench_x",
        {"200 pools: cold wave s": 150.0, "1000 pools: cold wave s": 1500.0},
        root=tmp_path,
        calibrate=half_second,
    )
    now = {"200 pools: cold wave s": 200.0}

    same, why = baselines.kept_beside("bench_x", now, root=tmp_path, calibrate=lambda: 0.55)
    assert same == {"1000 pools: cold wave s": 1500.0} and why is None

    other, why = baselines.kept_beside("bench_x", now, root=tmp_path, calibrate=lambda: 1.0)
    assert other == {}
    assert why is not None and "another machine" in why and "1000 pools: cold wave s" in why


def test_figures_a_record_keeps_name_the_record_that_measured_them(tmp_path: Path) -> None:
    """A record of one size keeps the other's figures under their own commit and time, through
    any number of later records, and a run of that size is told which record it compares
    with: the file's commit is the newest record's and never claims a figure it kept."""
    both = {"200 pools: cold wave s": 150.0, "1000 pools: cold wave s": 1500.0}
    baselines.record("bench_x", both, root=tmp_path, ran_on="c1", calibrate=half_second)
    first = json.loads(baselines.path_of("bench_x", tmp_path).read_text())
    for ran_on in ("c2", "c3"):
        now = {"200 pools: cold wave s": 140.0}
        kept, _ = baselines.kept_beside("bench_x", now, root=tmp_path, calibrate=half_second)
        baselines.record(
            "bench_x", now, root=tmp_path, ran_on=ran_on, calibrate=half_second, kept=kept
        )
    body = json.loads(baselines.path_of("bench_x", tmp_path).read_text())
    assert body["commit"] == "c3" and body["figures"] == {**both, "200 pools: cold wave s": 140.0}
    assert body["earlier"] == {
        "1000 pools: cold wave s": {"commit": "c1", "recorded_at": first["recorded_at"]}
    }

    lines = baselines.comparison(
        "bench_x", {"1000 pools: cold wave s": 1510.0}, root=tmp_path, calibrate=half_second
    )
    assert f"(recorded earlier, at c1, {first['recorded_at']}: 1000 pools: cold wave s)" in (
        "\n".join(lines)
    ), lines
    own = baselines.comparison(
        "bench_x", {"200 pools: cold wave s": 140.0}, root=tmp_path, calibrate=half_second
    )
    assert not any("recorded earlier" in line for line in own), own

    # A record that measures the kept size again takes it back under its own commit.
    baselines.record("bench_x", both, root=tmp_path, ran_on="c4", calibrate=half_second, kept={})
    assert "earlier" not in json.loads(baselines.path_of("bench_x", tmp_path).read_text())


def test_a_record_drops_the_other_sizes_of_a_baseline_without_a_calibration(
    tmp_path: Path,
) -> None:
    path = baselines.record("bench_x", {"a": 1.0, "b": 2.0}, root=tmp_path, calibrate=half_second)
    body = json.loads(path.read_text())
    del body["machine"]["calibration_s"]
    path.write_text(json.dumps(body))
    kept, why = baselines.kept_beside("bench_x", {"a": 1.0}, root=tmp_path, calibrate=half_second)
    assert kept == {} and why is not None and "kept no calibration" in why
    assert baselines.kept_beside("bench_x", {"a": 1.0, "b": 1.0}, root=tmp_path) == ({}, None)


def test_the_scale_bench_prints_a_series_most_frequent_requests_apiserver_and_aws() -> None:
    from bench.bench_scale import _apiserver_rows, _whole_wave_rows

    figures = {
        "releaseWaveApi:AWS s3:HEAD object": 30.0,
        "releaseWaveApi:AWS ec2:DescribeInstances": 7.0,
        "releaseWaveApi:PATCH gangnodepools/status": 2.0,
        "releaseWaveApi:watch event nodes": 10.0,
        "warmWaveApi:PATCH workloads/status": 5.0,
        "warmWaveApi:AWS ec2:CreateTags": 1.0,
        "coldWaveApi:AWS s3:PUT object": 4.0,
    }
    assert [label for label, _, _ in _whole_wave_rows(figures, "release", "the release")] == [
        "AWS s3:HEAD object, the release",
        "AWS ec2:DescribeInstances, the release",
        "apiserver watch event nodes, the release",
        "apiserver PATCH gangnodepools/status, the release",
    ]
    assert _whole_wave_rows(figures, "cold", "the cold wave") == [
        ("AWS s3:PUT object, the cold wave", "coldWaveApi:AWS s3:PUT object", "")
    ]
    assert [key for _, key, _ in _apiserver_rows(figures)][::4] == [
        "warmWaveApi:PATCH workloads/status",
        "warmWaveApi:AWS ec2:CreateTags",
    ]
