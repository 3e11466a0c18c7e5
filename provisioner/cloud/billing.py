"""What managed instances cost, and how much of it was stranded, from EC2's own history.

One definition, used by the controller's metric (the reaper's sweep, through `Meter`),
the demo and the benchmarks' launchers alike:

    **stranded** node-seconds are the share of an instance's billed node-seconds that
    falls outside the time its whole gang (every one of the N instances of its
    generation, in its pool) ran and was the pool's only whole gang, and all of them
    when its gang ended without ever serving a Workload.

So a partial set (3 of 4 running) and an instance rolled back after a short fleet answer
are stranded, minimum charge and all; a whole set booting, joining, running the job or held
warm is not, unless:
- it ended without ever serving a Workload (launched, whole, released: nothing ran on it).
  EC2 cannot say what ran on an instance, so this rule needs the caller to say which gangs
  served (`served`, from Kubernetes: the Workloads admitted onto them); without it, only
  EC2's history is judged. A gang still running is not judged by it yet: it may serve.
- another whole gang of the same pool ran at the same time: a pool needs one set, so while
  two generations run whole at once, the younger one (whole later) is stranded for the
  overlap. The overlap is taken on the unwidened whole intervals (see `TOGETHER`), so a set
  released a second before its successor launched overlaps nothing.

EC2 bills Linux instances per second with a 60-second minimum; the minimum is
charged here too, and split between stranded and useful as the instance's life was.
EC2 reports times to the second and launches or terminates a set one instance at a time,
so members that start (or end) within `TOGETHER` of the moment the gang became whole (or
stopped being whole) count as starting (ending) with it.

The history is what DescribeInstances says of every managed instance, terminated ones
included: `LaunchTime`, and for a terminated instance the time in its
`StateTransitionReason` ("User initiated (2026-11-30 12:00:00 GMT)"). A gang is one
generation's group *in one pool*: group names (`gen-<n>`) repeat across pools, and two
pools' halves must never add up to a whole gang.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.cloud.types import InstanceView

__all__ = [
    "MIN_BILLED_SECONDS",
    "Bill",
    "Gang",
    "InstanceLife",
    "Meter",
    "Overlap",
    "Served",
    "bill",
    "instance_life",
    "life_of",
    "never_served",
    "overlaps",
    "whole_intervals",
]

MIN_BILLED_SECONDS: Final = 60.0
TOGETHER: Final = timedelta(seconds=2)
_ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


@dataclass(frozen=True)
class Gang:
    """The instances launched together as one generation of one pool."""

    pool: str | None
    group: str | None


@dataclass(frozen=True)
class InstanceLife:
    instance_id: str
    group: str | None
    launched: datetime
    # None while it still runs.
    ended: datetime | None
    pool: str | None = None

    @property
    def gang(self) -> Gang:
        return Gang(self.pool, self.group)


@dataclass(frozen=True)
class Bill:
    billed: float
    stranded: float

    def __add__(self, other: Bill) -> Bill:
        return Bill(self.billed + other.billed, self.stranded + other.stranded)


def instance_life(raw: Mapping[str, Any]) -> InstanceLife:
    """One DescribeInstances entry as a life. An ended instance whose reason carries no
    time ends at its launch: billed the minimum, never more than EC2 could show."""
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or ()}
    return _life(
        str(raw["InstanceId"]),
        str((raw.get("State") or {}).get("Name", "")),
        _aware(raw["LaunchTime"]),
        raw.get("StateTransitionReason"),
        tags,
    )


def life_of(view: InstanceView) -> InstanceLife | None:
    """The engine's view of an instance as a life (None if EC2 gave no launch time)."""
    if view.launch_time is None:
        return None
    return _life(
        view.instance_id, view.state, _aware(view.launch_time), view.state_reason, view.tags
    )


def _life(
    instance_id: str,
    state: str,
    launched: datetime,
    reason: str | None,
    tags: Mapping[str, str],
) -> InstanceLife:
    ended: datetime | None = None
    if state in _ENDED_STATES:
        match = _REASON_TIME.search(reason or "")
        ended = (
            datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            if match
            else launched
        )
        ended = max(ended, launched)
    return InstanceLife(instance_id, tags.get(c.TAG_GROUP), launched, ended, tags.get(c.TAG_POOL))


# Whether a gang ever served a Workload (the caller's record; EC2 has none).
Served = Callable[[Gang], bool]


@dataclass(frozen=True)
class Overlap:
    """Two whole gangs of one pool at once: `younger` is stranded from `start` to `end`."""

    older: Gang
    younger: Gang
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def bill(
    lives: Iterable[InstanceLife],
    gang_size: Callable[[Gang], int],
    now: datetime,
    served: Served | None = None,
) -> dict[str, Bill]:
    """Each instance's billed and stranded node-seconds up to `now`.

    `gang_size(gang)` is the N the generation was launched for (0 when unknown: nothing
    of that gang counts as whole, so all of it is stranded). `served(gang)`: whether the
    gang ever served a Workload; None when the caller cannot say.
    """
    by_gang = _by_gang(lives)
    useful_by_gang = _useful(by_gang, gang_size, now, served)
    bills: dict[str, Bill] = {}
    for gang, members in by_gang.items():
        whole = useful_by_gang[gang]
        for life in members:
            end = life.ended or now
            ran = max((end - life.launched).total_seconds(), 0.0)
            billed = max(ran, MIN_BILLED_SECONDS) if life.ended else ran
            useful = sum(_overlap(life.launched, end, a, b) for a, b in whole)
            stranded_share = 1.0 - useful / ran if ran > 0 else 1.0
            bills[life.instance_id] = Bill(billed, max(billed * stranded_share, 0.0))
    return bills


def whole_intervals(
    lives: Iterable[InstanceLife],
    gang_size: Callable[[Gang], int],
    now: datetime,
    served: Served | None = None,
) -> dict[Gang, list[tuple[datetime, datetime]]]:
    """Per gang, the intervals up to `now` in which it ran whole, alone in its pool and
    (when `served` is given) not idle for good: the time `bill` counts as useful, for
    whoever draws what was stranded when."""
    return _useful(_by_gang(lives), gang_size, now, served)


def never_served(lives: Iterable[InstanceLife], served: Served, now: datetime) -> list[Gang]:
    """The gangs that ended (every member) without ever serving a Workload."""
    return [
        gang
        for gang, members in _by_gang(lives).items()
        if _ended(members, now) and not served(gang)
    ]


def overlaps(
    lives: Iterable[InstanceLife],
    gang_size: Callable[[Gang], int],
    now: datetime,
    served: Served | None = None,
) -> list[Overlap]:
    """Every stretch in which two whole gangs of one pool ran at once."""
    by_gang = _by_gang(lives)
    idle = _idle_for_good(by_gang, now, served)
    return _overlaps(by_gang, gang_size, now, idle)


class Meter:
    """Running totals of `bill` for a Prometheus counter, fed the history at each sweep.

    A counter only grows, and EC2 forgets terminated instances after a while, so the meter
    keeps, per instance, the most it has counted and adds only growth. The first reading
    counts nothing: it is the baseline of a controller that (re)started, whose predecessor
    counted that history already; instances that appear later are counted from launch,
    a rolled-back set that lived and died between two sweeps included.
    """

    def __init__(self) -> None:
        self._counted: dict[str, Bill] | None = None

    def advance(
        self, lives: Iterable[InstanceLife], gang_size: Callable[[Gang], int], now: datetime
    ) -> Bill:
        """What was billed and stranded since the last reading."""
        bills = bill(lives, gang_size, now)
        if self._counted is None:
            self._counted = bills
            return Bill(0.0, 0.0)
        added = Bill(0.0, 0.0)
        counted: dict[str, Bill] = {}
        for iid, now_billed in bills.items():
            was = self._counted.get(iid, Bill(0.0, 0.0))
            most = Bill(max(was.billed, now_billed.billed), max(was.stranded, now_billed.stranded))
            added += Bill(most.billed - was.billed, most.stranded - was.stranded)
            counted[iid] = most
        self._counted = counted
        return added


def _useful(
    by_gang: Mapping[Gang, list[InstanceLife]],
    gang_size: Callable[[Gang], int],
    now: datetime,
    served: Served | None,
) -> dict[Gang, list[tuple[datetime, datetime]]]:
    """Per gang, its whole intervals less what the rules strand (see the module's doc)."""
    idle = _idle_for_good(by_gang, now, served)
    stranded: dict[Gang, list[tuple[datetime, datetime]]] = defaultdict(list)
    for overlap in _overlaps(by_gang, gang_size, now, idle):
        stranded[overlap.younger].append((overlap.start, overlap.end))
    useful: dict[Gang, list[tuple[datetime, datetime]]] = {}
    for gang, members in by_gang.items():
        whole = [] if gang in idle else _whole_intervals(members, gang_size(gang), now)
        useful[gang] = _minus(whole, stranded.get(gang, []))
    return useful


def _idle_for_good(
    by_gang: Mapping[Gang, list[InstanceLife]], now: datetime, served: Served | None
) -> set[Gang]:
    if served is None:
        return set()
    return {g for g, members in by_gang.items() if _ended(members, now) and not served(g)}


def _ended(members: list[InstanceLife], now: datetime) -> bool:
    return all(m.ended is not None and m.ended <= now for m in members)


def _overlaps(
    by_gang: Mapping[Gang, list[InstanceLife]],
    gang_size: Callable[[Gang], int],
    now: datetime,
    idle: set[Gang],
) -> list[Overlap]:
    """Per pool, the stretches in which a gang ran whole while an older whole gang (one
    whole earlier) of the same pool did too; gangs idle for good are stranded already."""
    raw: dict[str | None, list[tuple[datetime, Gang, list[tuple[datetime, datetime]]]]] = (
        defaultdict(list)
    )
    for gang, members in by_gang.items():
        if gang in idle or gang.pool is None:  # no pool tag: no pool to need one set
            continue
        intervals = _raw_whole_intervals(members, gang_size(gang), now)
        if intervals:
            raw[gang.pool].append((intervals[0][0], gang, intervals))
    found: list[Overlap] = []
    for gangs in raw.values():
        gangs.sort(key=lambda entry: (entry[0], entry[1].group or ""))
        for i, (_, younger, mine) in enumerate(gangs):
            for _, older, theirs in gangs[:i]:
                for a0, a1 in mine:
                    for b0, b1 in theirs:
                        start, end = max(a0, b0), min(a1, b1)
                        if end > start:
                            found.append(Overlap(older, younger, start, end))
    return found


def _minus(
    intervals: list[tuple[datetime, datetime]], cut: list[tuple[datetime, datetime]]
) -> list[tuple[datetime, datetime]]:
    """`intervals` without any time in `cut`."""
    left = list(intervals)
    for c0, c1 in cut:
        kept: list[tuple[datetime, datetime]] = []
        for a0, a1 in left:
            if a0 < c0:
                kept.append((a0, min(a1, c0)))
            if a1 > c1:
                kept.append((max(a0, c1), a1))
        left = [(a, b) for a, b in kept if b > a]
    return left


def _by_gang(lives: Iterable[InstanceLife]) -> dict[Gang, list[InstanceLife]]:
    by_gang: dict[Gang, list[InstanceLife]] = defaultdict(list)
    for life in lives:
        by_gang[life.gang].append(life)
    return by_gang


def _whole_intervals(
    members: list[InstanceLife], n: int, now: datetime
) -> list[tuple[datetime, datetime]]:
    """The intervals in which at least `n` members of one generation ran at once, widened
    to the members that started or ended with the gang (`_with_stragglers`)."""
    whole = _raw_whole_intervals(members, n, now)
    return [_with_stragglers(members, a, b, now) for a, b in whole]


def _raw_whole_intervals(
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
    return whole


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
    moment: datetime = value
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
