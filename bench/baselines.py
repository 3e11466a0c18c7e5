"""Each bench's last recorded figures, kept in the repository, and a run's change against them.

A bench run with `--record` writes `bench/baselines/<bench>.json`: its figures (name to
number), the commit it ran on (and whether the tree had changes), the machine (host, CPUs,
Python) and when. Every run then prints its figures beside the recorded ones with the ratio,
so a regression shows up in the run that makes it rather than in the next issue. Figures,
not assertions: nothing fails on a ratio.

Two things keep a ratio from blaming the code for the machine. Each record and each run
time the same piece of one-core Python work (`calibration_seconds`), and the comparison
prints the two beside each other: a ratio near theirs is the machine. And a run whose cores
the hypervisor took more than `STEAL_LIMIT_PERCENT` of (steal, from /proc/stat) is not kept
as a baseline (`refusal`): it ran on less machine than it says, and would make every later
run look fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

BASELINES = Path(__file__).resolve().parent / "baselines"
STEAL_LIMIT_PERCENT: Final = 10.0


def commit() -> str:
    """The checkout's commit, `+changes` when tracked files differ from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if dirty else head


def calibration_seconds(repeats: int = 7) -> float:
    """The best of `repeats` timings of a fixed piece of one-core Python work, of the kinds
    the benches' processes do most (JSON round trips of object lists, hashing): how fast
    this machine is, in the benches' own terms, at the moment it is asked. Timed in a fresh
    interpreter: in a bench's own process, after a run, the same work took nearly twice as
    long (its leftover threads want the GIL). Best of seven: on a shared VM one timing of
    it ranges over nearly 2x from one second to the next, with no steal to show for it."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from bench.baselines import timed_work; print(timed_work({repeats}))",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


def timed_work(repeats: int) -> float:
    """`calibration_seconds`'s work, timed in this process: the best of `repeats`."""
    body = {
        "items": [
            {"metadata": {"name": f"pool-{i}", "labels": {"a": "b" * 16}}, "spec": {"count": i}}
            for i in range(2_000)
        ]
    }
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(40):
            json.loads(json.dumps(body))
        hashlib.sha256(bytes(64 << 20)).digest()
        best = min(best, time.perf_counter() - started)
    return best


def machine(calibrate: Callable[[], float] = calibration_seconds) -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "calibration_s": round(calibrate(), 3),
    }


def refusal(steal_percent: float | None) -> str | None:
    """Why a run's figures may not be kept as the baseline (None: they may)."""
    if steal_percent is None or steal_percent <= STEAL_LIMIT_PERCENT:
        return None
    return (
        f"Not recorded as the baseline: the hypervisor took {steal_percent:.0f} % of the cores "
        f"during the run (a baseline allows {STEAL_LIMIT_PERCENT:.0f} %), so it ran on less "
        "machine than it says; run it again when the machine is quieter."
    )


# How far two calibrations may be apart and still be one machine's (its moments differ by
# 10-15 % on a quiet shared VM; the slower of the two VMs measured so far ran stack work at
# about half the other's speed).
SAME_MACHINE_TOLERANCE: Final = 0.2


def kept_beside(
    bench: str,
    measured: Mapping[str, float],
    root: Path = BASELINES,
    calibrate: Callable[[], float] = calibration_seconds,
) -> tuple[dict[str, float], str | None]:
    """The recorded figures a new record of `measured` keeps beside it (a bench that
    records several sizes keeps those it did not measure now), and what it drops, and why.
    Only a baseline of the same machine keeps them: one whose calibration is within
    `SAME_MACHINE_TOLERANCE` of this machine's. A baseline of another machine, or of one that
    kept no calibration, is dropped whole, so that one record never holds two machines'
    figures under one calibration."""
    base = load(bench, root)
    if base is None:
        return {}, None
    others = {k: v for k, v in base.get("figures", {}).items() if k not in measured}
    if not others:
        return {}, None
    recorded, now = base.get("machine", {}).get("calibration_s"), calibrate()
    if recorded and abs(now / recorded - 1) <= SAME_MACHINE_TOLERANCE:
        return others, None
    why = (
        "kept no calibration"
        if not recorded
        else f"ran on another machine (calibration {recorded:.2f}s, here {now:.2f}s)"
    )
    return {}, f"Dropped from the baseline, as its record {why}: {', '.join(sorted(others))}"


def path_of(bench: str, root: Path = BASELINES) -> Path:
    return root / f"{bench}.json"


def record(
    bench: str,
    figures: Mapping[str, float],
    root: Path = BASELINES,
    ran_on: str | None = None,
    calibrate: Callable[[], float] = calibration_seconds,
    kept: Mapping[str, float] | None = None,
) -> Path:
    """Write `figures` as the bench's baseline, with the commit (`ran_on`, read when the run
    started; by default now) and machine they ran on, beside the figures `kept` from the
    record it replaces (`kept_beside`). Those keep the commit and time of the record that
    measured them (`earlier`), so the file's own commit never claims a figure it did not
    measure."""
    root.mkdir(parents=True, exist_ok=True)
    kept = {k: v for k, v in (kept or {}).items() if k not in figures}
    before = load(bench, root) if kept else None
    body: dict[str, Any] = {
        "bench": bench,
        "commit": ran_on or commit(),
        "machine": machine(calibrate),
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": {k: float(v) for k, v in {**kept, **figures}.items()},
    }
    if kept:
        body["earlier"] = {name: _source_of(before or {}, name) for name in kept}
    path = path_of(bench, root)
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def _source_of(base: Mapping[str, Any], name: str) -> dict[str, str]:
    """The commit and time of the record that measured figure `name` of `base`."""
    earlier = (base.get("earlier") or {}).get(name)
    if earlier:
        return {"commit": str(earlier["commit"]), "recorded_at": str(earlier["recorded_at"])}
    return {"commit": str(base.get("commit")), "recorded_at": str(base.get("recorded_at"))}


def load(bench: str, root: Path = BASELINES) -> dict[str, Any] | None:
    path = path_of(bench, root)
    return json.loads(path.read_text()) if path.exists() else None


def comparison(
    bench: str,
    figures: Mapping[str, float],
    root: Path = BASELINES,
    calibrate: Callable[[], float] = calibration_seconds,
) -> list[str]:
    """The lines that put this run's figures beside the recorded ones, with the ratio, and
    this machine's calibration beside the baseline's."""
    base = load(bench, root)
    if base is None:
        return [f"No baseline recorded for {bench} (run it with --record to keep one)."]
    kept: dict[str, float] = base.get("figures", {})
    where = base.get("machine", {})
    lines = [
        f"Against the baseline recorded at {base.get('commit')} on {where.get('host')} "
        f"({where.get('cpus')} CPUs), {base.get('recorded_at')}:",
        _machines(where.get("calibration_s"), calibrate()),
    ]
    # Figures a later record kept beside its own: each group names the record that measured it.
    groups: dict[tuple[str, str], list[str]] = {}
    for name in figures:
        if name in (base.get("earlier") or {}):
            source = _source_of(base, name)
            groups.setdefault((source["commit"], source["recorded_at"]), []).append(name)
    for (was_commit, was_at), names in groups.items():
        lines.append(f"  (recorded earlier, at {was_commit}, {was_at}: {', '.join(names)})")
    lines.append(f"  {'figure':<44}{'now':>12}{'baseline':>12}{'ratio':>9}")
    for name, value in figures.items():
        was = kept.get(name)
        if was is None:
            lines.append(f"  {name:<44}{value:>12.2f}{'—':>12}{'new':>9}")
            continue
        ratio = "—" if was == 0 and value == 0 else ("∞" if was == 0 else f"{value / was:.2f}x")
        lines.append(f"  {name:<44}{value:>12.2f}{was:>12.2f}{ratio:>9}")
    gone = sorted(set(kept) - set(figures))
    if gone:
        lines.append(f"  recorded but not measured now: {_unmeasured(gone)}")
    return lines


def _unmeasured(names: list[str]) -> str:
    """The figures a run did not measure, a count per series or size (the name's part
    before its first colon) and any other name in full: a run of one backend or one size
    leaves a hundred names, which listed one by one buried the comparison above them."""
    groups: dict[str, int] = {}
    alone: list[str] = []
    for name in names:
        group, colon, _ = name.partition(":")
        if colon:
            groups[group] = groups.get(group, 0) + 1
        else:
            alone.append(name)
    counted = [f"{group} ({count})" for group, count in groups.items()]
    return ", ".join(counted + alone)


def compare_and_record(
    bench: str,
    figures: Mapping[str, float],
    *,
    record_run: bool,
    ran_on: str,
    steal_percent: float | None = None,
    root: Path = BASELINES,
    calibrate: Callable[[], float] = calibration_seconds,
) -> None:
    """What every bench ends with: its figures printed beside the recorded ones and, with
    ``record_run`` (`--record`), kept as the baseline unless the run's steal refuses it
    (`refusal`; a bench that does not measure steal passes None)."""
    print("\n" + "\n".join(comparison(bench, figures, root, calibrate)))
    if not record_run:
        return
    refused = refusal(steal_percent)
    if refused:
        print(refused)
        return
    kept = record(bench, figures, root, ran_on=ran_on, calibrate=calibrate)
    print(f"Recorded as the baseline: {kept}")


def _machines(recorded: float | None, now: float) -> str:
    if not recorded:
        return (
            f"  (this machine's calibration: {now:.2f}s; the baseline kept none, so its ratios "
            "compare machines as well as code)"
        )
    return (
        f"  (calibration, one core of Python work: {now:.2f}s here, {recorded:.2f}s when "
        f"recorded, {now / recorded:.2f}x: a ratio near that is the machine, not the code)"
    )
