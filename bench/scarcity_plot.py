"""The scarcity bench's trace as a picture: capacity, and per launcher what ran and what was
stranded, over the same seconds. Called by `bench.bench_scarcity --plot PATH`.

The counts come from the launchers' EC2 histories and `billing.whole_intervals`, the time
`billing.bill` counts as useful: an instance is stranded at a moment when it runs outside
every interval in which its whole gang ran. An instance launched and terminated in the same
second does not show as a line (it is in the panel's billed and stranded totals, minimum
charge and all). matplotlib is imported only here, and only when a picture is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from provisioner.cloud.billing import InstanceLife, whole_intervals


@dataclass(frozen=True)
class Lane:
    """One launcher's panel: its counts at each of the picture's times, and its bill."""

    name: str
    running: tuple[int, ...]
    stranded: tuple[int, ...]
    billed: float
    stranded_total: float


def counts_over_time(
    lives: Sequence[InstanceLife], n: int, epoch: datetime, until: float, times: Sequence[float]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """At each of `times` (seconds from `epoch`), how many instances ran and how many of
    those were stranded; an instance still running ends at `until` (the job's end)."""
    now = epoch + timedelta(seconds=until)
    whole = whole_intervals(lives, lambda _: n, now)
    running: list[int] = []
    stranded: list[int] = []
    for t in times:
        at = epoch + timedelta(seconds=t)
        up = [life for life in lives if life.launched <= at < (life.ended or now)]
        running.append(len(up))
        stranded.append(sum(1 for life in up if not any(a <= at < b for a, b in whole[life.gang])))
    return tuple(running), tuple(stranded)


def draw(
    path: Path, title: str, times: Sequence[float], capacity: Sequence[int], lanes: Sequence[Lane]
) -> None:
    """One panel per launcher on a shared time axis, written as a PNG with the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 1.9 * len(lanes) + 1.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(lanes), 1, sharex=True, squeeze=False)[:, 0]
    top = max([*capacity, *(max(lane.running, default=0) for lane in lanes)]) + 0.5
    for ax, lane in zip(axes, lanes, strict=True):
        ax.fill_between(
            times, capacity, step="post", color="0.88", label="capacity this tenant could hold"
        )
        ax.fill_between(
            times, lane.stranded, step="post", color="tab:red", alpha=0.55, lw=0, label="stranded"
        )
        ax.step(times, lane.running, where="post", color="tab:blue", lw=1.6, label="running")
        ax.set_ylim(0, top)
        ax.set_yticks(range(int(top) + 1))
        ax.set_ylabel("instances")
        ax.set_title(
            f"{lane.name}: billed {lane.billed:.0f} node-s, stranded {lane.stranded_total:.0f}",
            loc="left",
            fontsize=10,
        )
        ax.grid(axis="x", color="0.8", lw=0.5)
    axes[0].legend(loc="upper left", fontsize=8, ncols=3)
    axes[-1].set_xlabel("seconds from start")
    axes[-1].set_xlim(0, max(times))
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=100)
