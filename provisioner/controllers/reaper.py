"""Reaper: the leak backstop that needs nothing but EC2's own record.

Watches: EC2, by tag, every `reapIntervalSeconds`, and the GangNodePool cache (which pools
exist, their UIDs, whether a warm set is claimed again).
Writes, alone: TerminateInstances (with ENI cleanup) of instances EC2's record proves this
cluster's controller launched, and the deletion of launch templates and placement groups
whose pool no longer exists and whose ids that pool's stack recorded (`cloud.leftovers`:
tags find them, the stack's record proves them; the rest is reported, not deleted).
Tells the instance index which pools it terminated instances of (`forget`).
Each of those writes is refused once this replica no longer surely leads (the engine's
clients are fenced, ``cloud.fencing``): a sweep already running when the Lease is lost
stops at its next write (`NotLeader`) and the loop waits for the next one.

**It fails closed.** "The pool no longer exists" is read from the pool cache, so a cache
that is empty because it never synced (RBAC denying `list gangnodepools`, a slow apiserver)
or stale because its watch fails would turn every gang into an orphan. Each sweep first
asks the cache whether it can be trusted (`cache_problem`: the informer has synced, its
last list/watch succeeded, one completed recently); if not, it terminates nothing, logs
why and counts `atomic_gang_reaper_sweeps_skipped_total{reason}`. It still sets the billed
instance gauge, which needs EC2 alone; the billing meter waits (it reads gang sizes from
the cache).

**Ownership is proven, never read from tags** (`provisioner.cloud.ownership`). Tags are
only the index used to find candidates: anyone allowed to tag could otherwise have any
instance reaped. Every candidate's launch token, as EC2 recorded it (the instance's
ClientToken, or for a fleet instance the ClientToken of the fleet named by EC2's own
`aws:ec2:fleet-id` tag), must be
- the token the product derives from the UID of the pool the cache holds (a set of that
  pool object), or
- a token signed (HMAC-SHA256) with this cluster's ownership key for the cluster and the
  pool name the instance carries (`naming.client_token`). Only the controller holds the
  key (a Secret mounted into its pod, `ownership.keyFile`), so only it can mint such a
  token; EC2 keeps the token with what it launched and nobody can change it afterwards;
  the MAC covers the cluster, pool and generation, so neither another cluster's token nor
  a re-tagged instance of ours verifies. This is what proves an orphan ours after its pool,
  and with it the pool's UID, is gone, or after the pool was recreated under a new UID.
Anything else (an instance launched by hand, by a script, by another cluster's controller,
and then tagged as ours) is left alone and reported: logged when the set changes and
counted in `atomic_gang_instances_unproven{reason}`. Without an ownership key, orphans
cannot be proven and are reported the same way instead of terminated.

An instance proven ours goes when it is past its max lifetime, past an expired
keep-warm tag while its pool holds it warm and unclaimed (with a grace period, the pool
reconciler being the one expected to release it; a claim does not clear the tag, so the
later of the tag and the pool's own `keepWarmUntil` counts), or when it was launched for a
pool the cache no longer holds (and is older than one sweep interval, as the cache may lag
a pool just created). Because the proof and
these tags are written atomically at launch, the reaper works after a controller crash, a
lost Pulumi state or a deleted CRD.

**Max lifetime is `min(tag, limits.maxLifetime)`.** The tag is written at launch from the
Job's annotation, which the webhook and the Workload path bound by `limits.maxLifetime`; but
anyone allowed to tag can rewrite it, so the tag can only shorten the life the installer
allows, never lengthen it: a tag removed, unparsable or set to `876000h` means the limit.

The sweep also feeds the billing metrics. It lists every managed instance, terminated ones
included (one DescribeInstances listing serves both jobs), and bills that history with
``provisioner.cloud.billing``, the one definition of stranded the demo and the benches
use: node-seconds billed outside the time the whole gang ran — a partial
set, an instance of a broken gang, a rolled-back launch; not a whole set joining, running
or held warm.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from provisioner.api.constants import Phase
from provisioner.api.fencing import NotLeader
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.billing import Gang, InstanceLife, Meter, life_of
from provisioner.cloud.block_bill import BoughtBlock, block_charges
from provisioner.cloud.errors import CloudError
from provisioner.cloud.leftovers import Leftover, split_proven
from provisioner.cloud.naming import OwnershipKey
from provisioner.cloud.ownership import Standing, fleet_of, prove
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import ALL_STATES, LIVE_STATES
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.pool.phases import serves_gang
from provisioner.controllers.ports import EngineOps, StackOps
from provisioner.pulumi_driver.port import StackError

log = logging.getLogger(__name__)

ORPHANED = "orphaned"
MAX_LIFETIME = "max-lifetime"
KEEP_WARM_EXPIRED = "keep-warm-expired"
# Why a sweep terminated nothing (the `reason` label of `reaper_sweeps_skipped`).
CACHE_NOT_TRUSTED = "pool-cache-not-trusted"


@dataclass(frozen=True)
class PoolFacts:
    """What the reaper reads of a pool from the cache."""

    phase: Phase
    claimed: bool
    # The pool's N (spec.count): how many of a generation make its whole gang; 0 = unknown.
    gang_size: int = 0
    # metadata.uid: launch tokens of this pool object derive from it (`ownership.prove`).
    uid: str = ""
    # spec.instanceType: a label of the pools-by-phase gauge.
    instance_type: str = ""
    # The Capacity Block bought for the pool (status.blockPurchase), once EC2 sold it.
    block: BoughtBlock | None = None
    # status.keepWarmUntil: the window the pool itself holds (its tag may be an earlier one).
    keep_warm_until: datetime | None = None


def pool_facts(pools: Iterable[GangNodePool]) -> dict[str, PoolFacts]:
    """What the reaper reads of each pool, by name (the composition root hands it the
    pools' cache)."""
    return {
        pool.name: PoolFacts(
            phase=pool.status.phase,
            claimed=pool.spec.claim is not None,
            gang_size=pool.spec.count,
            uid=pool.metadata.uid or "",
            instance_type=pool.spec.instance_type,
            block=_bought(pool),
            keep_warm_until=pool.status.keep_warm_until,
        )
        for pool in pools
    }


def _bought(pool: GangNodePool) -> BoughtBlock | None:
    block = pool.status.block_purchase
    if block is None or block.reservation_id is None:
        return None
    return BoughtBlock(
        block.reservation_id,
        pool.name,
        block.instance_count,
        block.starts_at,
        block.ends_at,
        block.upfront_fee,
        block.currency,
    )


def verdict(
    instance: InstanceView,
    standing: Standing,
    pools: dict[str, PoolFacts],
    now: datetime,
    keep_warm_grace: timedelta,
    *,
    max_lifetime: timedelta,
) -> str | None:
    """Why this instance must go, or None. ``standing`` is how EC2's record proves it
    ours (`ownership.prove`): an unproven instance never goes; one launched for a pool the
    cache does not hold (gone, or recreated under another UID) is an orphan once older
    than ``keep_warm_grace`` (one sweep interval). ``max_lifetime`` is the installer's
    `limits.maxLifetime`: no tag makes a life longer (`lifetime_of`)."""
    if standing is Standing.UNPROVEN:
        return None
    tags = instance.managed
    if standing is Standing.EARLIER or not tags.pool or tags.pool not in pools:
        # A cache a moment behind may not hold a pool created just before its launch.
        born = instance.launch_time
        young = born is not None and now < born + keep_warm_grace
        return None if young else ORPHANED
    born, lifetime = instance.launch_time, lifetime_of(tags.max_lifetime, max_lifetime)
    if born is not None and now >= born + lifetime:
        return MAX_LIFETIME
    if _keep_warm_over(tags.keep_warm_until, pools[tags.pool], now, keep_warm_grace):
        return KEEP_WARM_EXPIRED
    return None


def _keep_warm_over(
    tagged: datetime | None, pool: PoolFacts, now: datetime, grace: timedelta
) -> bool:
    """A warm set's window is over, a grace period past. The tag is written a pass after a
    set goes warm (at the pool's turn at the CreateTags budget) and is not cleared by a
    claim, so a set whose claim just ended carries the window before until its new tag
    lands: neither a claimed pool's set nor one in a phase that serves a gang (the claim's
    end not yet seen) goes for its tag, and the later of the tag and the pool's own window
    counts."""
    if pool.claimed or serves_gang(pool.phase) or tagged is None:
        return False
    until = max(tagged, pool.keep_warm_until or tagged)
    return now >= until + grace


def lifetime_of(tagged: timedelta | None, limit: timedelta) -> timedelta:
    """The life an instance gets: its tag's, but never more than the limit. A tag that is
    missing or not a duration (`tags.parse_go_duration` reads it as None) is the limit,
    not "forever": the tag is mutable, the limit is the installer's."""
    return limit if tagged is None else min(tagged, limit)


def stack_resource_ids(stacks: StackOps) -> Callable[[str], frozenset[str]]:
    """The EC2 ids (launch template, placement group) a pool's stack recorded, read through
    the stack port: none when the pool has no stack, or when it cannot be read (then
    nothing is proven, and nothing is deleted, this sweep)."""

    def read(pool: str) -> frozenset[str]:
        try:
            outputs = stacks.outputs(pool)
        except StackError as err:
            log.warning("reaper: the stack of gone pool %s could not be read: %s", pool, err)
            return frozenset()
        return outputs.resource_ids if outputs is not None else frozenset()

    return read


@dataclass(frozen=True)
class SweepReport:
    examined: int
    terminated: dict[str, list[str]]
    # Launch templates and placement groups whose pool no longer exists, deleted.
    infrastructure: tuple[str, ...] = ()
    # Live instances tagged as ours that EC2's record does not prove ours, by reason.
    unproven: dict[str, list[str]] = field(default_factory=dict)
    # Why this sweep acted on nothing (a cache it reads could not be trusted).
    skipped: str | None = None
    # Templates and groups tagged as a gone pool's that no stack of it records: left alone.
    foreign_infrastructure: tuple[str, ...] = ()


class Reaper:
    def __init__(
        self,
        engine: EngineOps,
        cluster: str,
        pool_facts: Callable[[], dict[str, PoolFacts]],
        interval_seconds: float,
        now: Callable[[], datetime],
        metrics: ControllerMetrics,
        forget: Callable[[str], None] = lambda _pool: None,
        *,
        cache_problem: Callable[[], str | None],
        ownership_key: OwnershipKey | None,
        max_lifetime: timedelta,
        stack_record: Callable[[str], frozenset[str]],
    ) -> None:
        """``max_lifetime``: `limits.maxLifetime`, the longest any instance lives.
        ``stack_record``: the EC2 ids a pool's stack recorded (`stack_resource_ids`)."""
        self._stack_record = stack_record
        self._foreign: frozenset[str] = frozenset()
        # The (phase, instance type) pairs the pools gauge carries, so a pair no pool has
        # any more is removed rather than left at its last count.
        self._pool_series: set[tuple[str, str]] = set()
        self._engine = engine
        self._max_lifetime = max_lifetime
        # Why the pool cache cannot be trusted now (None: it can): `Informer.problem`.
        self._cache_problem = cache_problem
        self._ownership_key = ownership_key
        # A fleet's ClientToken never changes: each fleet is described once.
        self._fleet_tokens: dict[str, str | None] = {}
        self._reported: frozenset[str] = frozenset()
        self._unproven_reasons: frozenset[str] = frozenset()
        # Told the pool of every instance terminated here: the pool reconciler's next read
        # of that pool asks EC2 instead of a listing from before (`InstanceIndex.forget`).
        self._forget = forget
        self._cluster = cluster
        self._pool_facts = pool_facts
        self._interval = interval_seconds
        self._now = now
        self._metrics = metrics
        self._meter = Meter()
        # N of each gang seen while its pool existed: a pool deleted later does not turn its
        # past whole gang into a stranded one.
        self._gang_sizes: dict[Gang, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> SweepReport:
        now = self._now()
        # EC2 first, the pools after: every instance listed was launched for a pool that
        # existed before this read. The cache is asked before and after that read, so a
        # watch failing in between is caught too.
        history = self._engine.find_managed(self._cluster, states=ALL_STATES)
        instances = [i for i in history if i.state in LIVE_STATES]
        problem = self._cache_problem()
        pools = self._pool_facts()
        problem = problem or self._cache_problem()
        if problem is not None:
            self._metrics.reaper_sweeps_skipped.labels(reason=CACHE_NOT_TRUSTED).inc()
            self._metrics.instances_billed.set(len(instances))
            log.warning("reaper: terminating nothing this sweep: %s", problem)
            return SweepReport(examined=len(instances), terminated={}, skipped=problem)
        fleets = self._fleets_of(instances)
        doomed: dict[str, list[str]] = {}
        doomed_pools: set[str] = set()
        unproven: dict[str, list[str]] = {}
        for instance in instances:
            facts = pools.get(instance.managed.pool or "")
            proof = prove(
                instance,
                cluster=self._cluster,
                pool_uid=facts.uid if facts is not None and facts.uid else None,
                key=self._ownership_key,
                fleet_tokens=fleets,
            )
            if proof.reason is not None:
                unproven.setdefault(proof.reason, []).append(instance.instance_id)
            reason = verdict(
                instance,
                proof.standing,
                pools,
                now,
                timedelta(seconds=self._interval),
                max_lifetime=self._max_lifetime,
            )
            if reason is not None:
                doomed.setdefault(reason, []).append(instance.instance_id)
                if instance.managed.pool:
                    doomed_pools.add(instance.managed.pool)
        ids = [iid for group in doomed.values() for iid in group]
        if ids:
            try:
                self._engine.release(ids)
            finally:  # a failed release may have terminated some
                for pool in doomed_pools:
                    self._forget(pool)
            for reason, group in doomed.items():
                self._metrics.reaped.labels(reason=reason).inc(len(group))
                log.warning("reaper terminated %d instances (%s): %s", len(group), reason, group)
        self._report_unproven(unproven)
        self._sample(history, pools, now, set(ids))
        removed, foreign = self._sweep_infrastructure(pools)
        return SweepReport(
            examined=len(instances),
            terminated=doomed,
            infrastructure=removed,
            unproven=unproven,
            foreign_infrastructure=foreign,
        )

    def _fleets_of(self, instances: Iterable[InstanceView]) -> dict[str, str | None]:
        unknown = [
            f
            for i in instances
            if (f := fleet_of(i)) is not None and self._fleet_tokens.get(f) is None
        ]
        if unknown:
            self._fleet_tokens.update(self._engine.fleet_tokens(unknown))
        return self._fleet_tokens

    def _report_unproven(self, unproven: dict[str, list[str]]) -> None:
        """Count and log the instances left alone for want of proof (logged when the set
        changes, not every sweep)."""
        for reason in (*unproven, *self._unproven_reasons):
            self._metrics.instances_unproven.labels(reason=reason).set(
                len(unproven.get(reason, ()))
            )
        self._unproven_reasons = frozenset(unproven)
        ids = frozenset(i for group in unproven.values() for i in group)
        if ids and ids != self._reported:
            for reason, group in unproven.items():
                log.warning(
                    "reaper: %d instances carry this cluster's gang tags but EC2's record "
                    "does not prove the controller launched them (%s); left alone: %s",
                    len(group),
                    reason,
                    group,
                )
        self._reported = ids

    def _sweep_infrastructure(
        self, pools: dict[str, PoolFacts]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Launch templates and placement groups our tags give to a pool that is gone (its
        release interrupted after the instances went, or the pool deleted without its
        finalizer): deleted when that pool's stack recorded their ids, else reported.
        Returns (deleted, reported)."""
        found = self._engine.leftovers(self._cluster)
        # EC2 first, the pools after (as for instances): a pool made since the sweep's
        # first read, whose stack just made its template, is in this read.
        now_held = self._pool_facts()
        gone = [o for o in found if o.pool not in pools and o.pool not in now_held]
        records = {
            pool: self._stack_record(pool) if pool else frozenset()
            for pool in {o.pool for o in gone}
        }
        orphans: list[Leftover] = []
        foreign: list[Leftover] = []
        for pool, record in records.items():
            proven, unproven = split_proven([o for o in gone if o.pool == pool], record)
            orphans += proven
            foreign += unproven
        self._report_foreign(foreign)
        removed: list[str] = []
        for orphan in orphans:
            try:
                self._engine.delete_leftovers([orphan])
            except CloudError as err:  # e.g. a placement group still in use: next sweep
                log.warning("reaper could not delete %s %s: %s", orphan.kind, orphan.name, err)
                continue
            removed.append(f"{orphan.kind}/{orphan.name}")
            log.warning(
                "reaper deleted %s %s of gone pool %s", orphan.kind, orphan.name, orphan.pool
            )
        return tuple(removed), tuple(f"{o.kind}/{o.resource_id}" for o in foreign)

    def _report_foreign(self, foreign: list[Leftover]) -> None:
        """Count and log what carries a gone pool's tags that its stack does not know (logged
        when the set changes): anyone who may tag can make a template look ours."""
        for kind in ("launch-template", "placement-group"):
            count = sum(1 for o in foreign if o.kind == kind)
            self._metrics.leftovers_unproven.labels(kind=kind).set(count)
        ids = frozenset(f"{o.kind}/{o.resource_id}" for o in foreign)
        if ids and ids != self._foreign:
            log.warning(
                "reaper: %d launch templates or placement groups carry this cluster's tags "
                "for a gone pool but no stack of that pool recorded them; left alone: %s",
                len(ids),
                sorted(ids),
            )
        self._foreign = ids

    def _count_pools(self, pools: Iterable[PoolFacts]) -> None:
        """Pools by phase and instance type; a pair that no pool has any more is removed."""
        counts: dict[tuple[str, str], int] = {}
        for facts in pools:
            pair = (str(facts.phase), facts.instance_type)
            counts[pair] = counts.get(pair, 0) + 1
        for phase, instance_type in self._pool_series - counts.keys():
            self._metrics.pools.remove(phase, instance_type)
        for (phase, instance_type), count in counts.items():
            self._metrics.pools.labels(phase=phase, instance_type=instance_type).set(count)
        self._pool_series = set(counts)

    def _sample(
        self,
        history: Iterable[InstanceView],
        pools: dict[str, PoolFacts],
        now: datetime,
        terminated: set[str],
    ) -> None:
        history = list(history)
        live = [i for i in history if i.state in LIVE_STATES and i.instance_id not in terminated]
        self._metrics.instances_billed.set(len(live))
        self._count_pools(pools.values())
        lives: list[InstanceLife] = []
        sizes: dict[Gang, int] = {}
        for view in history:
            life = life_of(view)
            if life is None:
                continue
            lives.append(life)
            pool_facts = pools.get(life.pool or "")
            known = self._gang_sizes.get(life.gang)
            if known is None and pool_facts is not None and pool_facts.gang_size > 0:
                known = pool_facts.gang_size
            if known is not None:
                sizes[life.gang] = known
        # Only gangs EC2 still lists are kept: the rest can bill nothing more.
        self._gang_sizes = sizes
        added = self._meter.advance(lives, lambda gang: self._gang_sizes.get(gang, 0), now)
        self._metrics.node_seconds_billed.inc(added.billed)
        self._metrics.node_seconds_stranded.inc(added.stranded)
        blocks = [p.block for p in pools.values() if p.block is not None]
        for charge in block_charges(blocks, lives, now):
            stranded = self._metrics.block_seconds_stranded.labels(pool=charge.block.pool)
            stranded.set(charge.stranded_seconds)

    # -- periodic runnable ----------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except NotLeader as fenced:  # not leading: this sweep writes nothing more
                log.info("reaper sweep stopped, not leader: %s", fenced)
            except Exception:  # the backstop must keep sweeping
                log.exception("reaper sweep failed")
            self._stop.wait(self._interval)
