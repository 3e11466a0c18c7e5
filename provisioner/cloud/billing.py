"""What managed instances cost, and how much of it was stranded, from EC2's own history.

One definition, used by the controller's metric, the demo, the chaos report and the
benchmarks' launchers alike:

    **stranded** node-seconds are the share of an instance's billed node-seconds that
    falls outside the time its whole gang (every one of the N instances of its
    generation) ran.

So a partial set (3 of 4 running) and an instance rolled back after a short fleet answer
are stranded, minimum charge and all; a whole set booting, joining, running the job or held
warm is not. EC2 bills Linux instances per second with a 60-second minimum; the minimum is
charged here too, and split between stranded and useful as the instance's life was.
EC2 reports times to the second and launches or terminates a set one instance at a time,
so members that start (or end) within `TOGETHER` of the moment the gang became whole (or
stopped being whole) count as starting (ending) with it.

The history is what DescribeInstances says of every managed instance, terminated ones
included: `LaunchTime`, and for a terminated instance the time in its
`StateTransitionReason` ("User initiated (2026-11-30 12:00:00 GMT)").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from provisioner.api import constants as c

__all__ = [
    "MIN_BILLED_SECONDS",
    "Bill",
    "InstanceLife",
    "bill",
    "instance_life",
    "whole_intervals",
]

MIN_BILLED_SECONDS: Final = 60.0
TOGETHER: Final = timedelta(seconds=2)
_ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


@dataclass(frozen=True)
class InstanceLife:
    instance_id: str
    group: str | None
    launched: datetime
    # None while it still runs.
    ended: datetime | None


@dataclass(frozen=True)
class Bill:
    billed: float
    stranded: float

    def __add__(self, other: Bill) -> Bill:
        return Bill(self.billed + other.billed, self.stranded + other.stranded)


def instance_life(raw: Mapping[str, Any]) -> InstanceLife:
    """One DescribeInstances entry as a life. An ended instance whose reason carries no
    time ends at its launch: billed the minimum, never more than EC2 could show."""
    launched = _aware(raw["LaunchTime"])
    ended: datetime | None = None
    if (raw.get("State") or {}).get("Name") in _ENDED_STATES:
        match = _REASON_TIME.search(str(raw.get("StateTransitionReason") or ""))
        ended = (
            datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            if match
            else launched
        )
        ended = max(ended, launched)
    group = next((t["Value"] for t in raw.get("Tags") or () if t["Key"] == c.TAG_GROUP), None)
    return InstanceLife(str(raw["InstanceId"]), group, launched, ended)


def bill(
    lives: Iterable[InstanceLife], gang_size: Callable[[str | None], int], now: datetime
) -> dict[str, Bill]:
    """Each instance's billed and stranded node-seconds up to `now`.

    `gang_size(group)` is the N the generation was launched for (0 when unknown: nothing
    of that group counts as a whole gang, so all of it is stranded).
    """
    bills: dict[str, Bill] = {}
    for group, members in _by_group(lives).items():
        whole = _whole_intervals(members, gang_size(group), now)
        for life in members:
            end = life.ended or now
            ran = max((end - life.launched).total_seconds(), 0.0)
            billed = max(ran, MIN_BILLED_SECONDS) if life.ended else ran
            useful = sum(_overlap(life.launched, end, a, b) for a, b in whole)
            stranded_share = 1.0 - useful / ran if ran > 0 else 1.0
            bills[life.instance_id] = Bill(billed, max(billed * stranded_share, 0.0))
    return bills


def whole_intervals(
    lives: Iterable[InstanceLife], gang_size: Callable[[str | None], int], now: datetime
) -> dict[str | None, list[tuple[datetime, datetime]]]:
    """Per group, the intervals up to `now` in which its whole gang ran: the time `bill`
    counts as useful, for whoever draws what was stranded when."""
    return {g: _whole_intervals(m, gang_size(g), now) for g, m in _by_group(lives).items()}


def _by_group(lives: Iterable[InstanceLife]) -> dict[str | None, list[InstanceLife]]:
    by_group: dict[str | None, list[InstanceLife]] = defaultdict(list)
    for life in lives:
        by_group[life.group].append(life)
    return by_group


def _whole_intervals(
    members: list[InstanceLife], n: int, now: datetime
) -> list[tuple[datetime, datetime]]:
    """The intervals in which at least `n` members of one generation ran at once."""
    if n <= 0:
        return []
    events: list[tuple[datetime, int]] = []
    for life in members:
        events.append((life.launched, 1))
        events.append((life.ended or now, -1))
    # Ends before starts at one instant: a replacement launched as another ends is not a
    # whole gang for that instant.
    events.sort(key=lambda e: (e[0], e[1]))
    whole: list[tuple[datetime, datetime]] = []
    running = 0
    since: datetime | None = None
    for at, step in events:
        running += step
        if running >= n and since is None:
            since = at
        elif running < n and since is not None:
            if at > since:
                whole.append((since, at))
            since = None
    return [_with_stragglers(members, a, b, now) for a, b in whole]


def _with_stragglers(
    members: list[InstanceLife], start: datetime, end: datetime, now: datetime
) -> tuple[datetime, datetime]:
    """Widen a whole interval to the members launched just before it or ended just after."""
    starts = [m.launched for m in members if start - TOGETHER <= m.launched <= start]
    ends = [m.ended or now for m in members if end <= (m.ended or now) <= end + TOGETHER]
    return min(starts, default=start), max(ends, default=end)


def _overlap(a0: datetime, a1: datetime, b0: datetime, b1: datetime) -> float:
    return max((min(a1, b1) - max(a0, b0)).total_seconds(), 0.0)


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)
