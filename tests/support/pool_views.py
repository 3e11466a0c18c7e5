"""Builders for the pool life cycle's pure functions (`pool_plan`, `pool_outcomes`): one pool
of four p4d nodes, seen at `NOW`, in whatever state a test names."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import (
    CapacityBlock,
    GangNodePoolSpec,
    GangNodePoolStatus,
    QueuedWorkload,
)
from provisioner.controllers.pool.phases import needs_launch_facts, needs_stack
from provisioner.controllers.pool.purchase import PurchaseRead
from provisioner.controllers.pool.steps import (
    NOT_FETCHED,
    AnyView,
    Instance,
    LaunchRead,
    PoolTimings,
    PoolView,
    StackRead,
)
from tests.support.pools import claim, pool_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
IDS = tuple(f"i-{n:017x}" for n in range(4))
LIVE = tuple(Instance(i, "gen-0") for i in IDS)
ROLE = "arn:aws:iam::123456789012:role/node"
CLAIM = claim(claimed_at="2026-11-29T11:00:00Z")
# The chart's defaults, but for a ten-minute join deadline.
TIMINGS = PoolTimings(
    join_deadline=timedelta(minutes=10),
    backoff_base=timedelta(seconds=5),
    backoff_max=timedelta(seconds=300),
    block_release_margin=timedelta(minutes=35),
    idle_stack_ttl=timedelta(days=7),
)

# The ClientTokens the engine says a launch of the pass would send (two subnets' worth).
TOKENS = ("agp-3-0123456789abcdef-aaaa", "agp-3-fedcba9876543210-bbbb")


def view(
    *,
    phase: Phase = Phase.IDLE,
    claimed: bool = True,
    status: dict[str, Any] | None = None,
    live: tuple[Instance, ...] = (),
    gone: frozenset[str] = frozenset(),
    ready: frozenset[str] = frozenset(),
    prepared: bool = True,
    partial: bool = False,
    deleting: bool = False,
    keep_warm: str = "10m",
    idle_stack_ttl: timedelta = TIMINGS.idle_stack_ttl,
    capacity_reservation_id: str | None = None,
    capacity_block: CapacityBlock | None = None,
    tokens: tuple[str, ...] = TOKENS,
    capacity_block_duration: str | None = None,
    purchase: PurchaseRead | None = None,
    queued_at: datetime | None = None,
    keep_warm_tagged: datetime | None = None,
) -> AnyView:
    """The pool as a pass sees it. Whether the stack is prepared (or held unprepared:
    `partial`), and the Capacity Block EC2 reports, are given only where the reconciler
    would read them (the row of the pool's phase: `needs_stack`, `needs_launch_facts`);
    elsewhere the view holds `NOT_FETCHED`."""
    spec = GangNodePoolSpec.model_validate(
        pool_spec(
            node_role_arn=ROLE,
            keep_warm_ttl=keep_warm,
            claim=CLAIM if claimed else None,
            capacity_reservation_id=capacity_reservation_id,
            capacity_block_duration=capacity_block_duration,
        )
    )
    if queued_at is not None:  # a Workload waiting for quota (`spec.queued`)
        queued = QueuedWorkload(
            namespace="team-a", name="wl-next", uid="wl-next-uid", queued_at=queued_at
        )
        spec = spec.model_copy(update={"queued": queued})
    st = GangNodePoolStatus.model_validate({"phase": phase, **(status or {})})
    return PoolView(
        name="pool-a",
        uid="pool-uid",
        spec=spec,
        status=st,
        deleting=deleting,
        has_finalizer=True,
        live=live,
        gone_ids=gone,
        ready_instance_ids=ready,
        now=NOW,
        timings=replace(TIMINGS, idle_stack_ttl=idle_stack_ttl),
        stack=(
            StackRead(prepared, partial=partial)
            if needs_stack(spec, st, deleting=deleting)
            else NOT_FETCHED
        ),
        launch=(
            LaunchRead(capacity_block, tokens, purchase)
            if needs_launch_facts(spec, st, deleting=deleting)
            else NOT_FETCHED
        ),
        keep_warm_tagged=keep_warm_tagged,
    )


def tagged(live: tuple[Instance, ...], until: str) -> tuple[Instance, ...]:
    """`live` as a listing shows it once the keep-warm window `until` is on every tag."""
    at = datetime.fromisoformat(until)
    return tuple(replace(i, keep_warm_until=at) for i in live)


def active(group: str = "gen-0", *, recorded: bool = True, **extra: Any) -> dict[str, Any]:
    """The status of a launched set of group `group`; `recorded`: the stack holds it."""
    return {
        "instanceIds": list(IDS),
        "activeGroup": group,
        "acquireGeneration": 1,
        "lastStackOperation": "record" if recorded else "prepare",
        **({"recordedGroup": group} if recorded else {}),
        **extra,
    }
