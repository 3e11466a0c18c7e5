"""Each bench's last recorded figures, kept in the repository, and a run's change against them.

A bench run with `--record` writes `bench/baselines/<bench>.json`: its figures (name to
number), the commit it ran on (and whether the tree had changes), the machine (host, CPUs,
Python) and when. Every run then prints its figures beside the recorded ones with the ratio,
so a regression shows up in the run that makes it rather than in the next issue. Figures,
not assertions: nothing fails on a ratio.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BASELINES = Path(__file__).resolve().parent / "baselines"


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


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def path_of(bench: str, root: Path = BASELINES) -> Path:
    return root / f"{bench}.json"


def record(
    bench: str, figures: Mapping[str, float], root: Path = BASELINES, ran_on: str | None = None
) -> Path:
    """Write `figures` as the bench's baseline, with the commit (`ran_on`, read when the run
    started; by default now) and machine they ran on."""
    root.mkdir(parents=True, exist_ok=True)
    body = {
        "bench": bench,
        "commit": ran_on or commit(),
        "machine": machine(),
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "figures": {k: float(v) for k, v in figures.items()},
    }
    path = path_of(bench, root)
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def load(bench: str, root: Path = BASELINES) -> dict[str, Any] | None:
    path = path_of(bench, root)
    return json.loads(path.read_text()) if path.exists() else None


def comparison(bench: str, figures: Mapping[str, float], root: Path = BASELINES) -> list[str]:
    """The lines that put this run's figures beside the recorded ones, with the ratio."""
    base = load(bench, root)
    if base is None:
        return [f"No baseline recorded for {bench} (run it with --record to keep one)."]
    kept: dict[str, float] = base.get("figures", {})
    where = base.get("machine", {})
    lines = [
        f"Against the baseline recorded at {base.get('commit')} on {where.get('host')} "
        f"({where.get('cpus')} CPUs), {base.get('recorded_at')}:",
        f"  {'figure':<44}{'now':>12}{'baseline':>12}{'ratio':>9}",
    ]
    for name, value in figures.items():
        was = kept.get(name)
        if was is None:
            lines.append(f"  {name:<44}{value:>12.2f}{'—':>12}{'new':>9}")
            continue
        ratio = "—" if was == 0 and value == 0 else ("∞" if was == 0 else f"{value / was:.2f}x")
        lines.append(f"  {name:<44}{value:>12.2f}{was:>12.2f}{ratio:>9}")
    gone = sorted(set(kept) - set(figures))
    if gone:
        lines.append(f"  recorded but not measured now: {', '.join(gone)}")
    return lines
