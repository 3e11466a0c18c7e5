"""Reaper: the leak backstop that needs nothing but EC2 tags.

Watches: EC2, by tag, every `reapIntervalSeconds` (and the GangNodePool cache, only to avoid
reaping a warm set a new claim is reusing).
Writes, alone: TerminateInstances (with ENI cleanup) of managed instances of this cluster,
and the deletion of our launch templates and placement groups whose pool no longer exists.
Tells the instance index which pools it terminated instances of (`forget`).

An instance goes when it is past its max-lifetime tag, past an expired keep-warm tag (with a
grace period, the pool reconciler being the one expected to release it), or when the pool
its tag names no longer exists. Because all three are read from tags written atomically at
launch, the reaper works after a controller crash, a lost Pulumi state or a deleted CRD.

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
from dataclasses import dataclass
from datetime import datetime, timedelta

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.billing import Gang, InstanceLife, Meter, life_of
from provisioner.cloud.errors import CloudError
from provisioner.cloud.types import InstanceView
from provisioner.cloud.views import ALL_STATES, LIVE_STATES
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.ports import EngineOps

log = logging.getLogger(__name__)

ORPHANED = "orphaned"
MAX_LIFETIME = "max-lifetime"
KEEP_WARM_EXPIRED = "keep-warm-expired"


@dataclass(frozen=True)
class PoolFacts:
    """What the reaper reads of a pool from the cache."""

    phase: str
    claimed: bool
    # The pool's N (spec.count): how many of a generation make its whole gang; 0 = unknown.
    gang_size: int = 0


def pool_facts(pools: Iterable[GangNodePool]) -> dict[str, PoolFacts]:
    """What the reaper reads of each pool, by name (the composition root hands it the
    pools' cache)."""
    return {
        pool.name: PoolFacts(
            phase=pool.status.phase,
            claimed=pool.spec.claim is not None,
            gang_size=pool.spec.count,
        )
        for pool in pools
    }


def verdict(
    instance: InstanceView,
    pools: dict[str, PoolFacts],
    now: datetime,
    keep_warm_grace: timedelta,
) -> str | None:
    """Why this managed instance must go, or None."""
    tags = instance.managed
    if not tags.pool or tags.pool not in pools:
        return ORPHANED
    born, lifetime = instance.launch_time, tags.max_lifetime
    if born is not None and lifetime is not None and now >= born + lifetime:
        return MAX_LIFETIME
    until = tags.keep_warm_until
    if until is not None and now >= until + keep_warm_grace and not pools[tags.pool].claimed:
        return KEEP_WARM_EXPIRED
    return None


@dataclass(frozen=True)
class SweepReport:
    examined: int
    terminated: dict[str, list[str]]
    # Launch templates and placement groups whose pool no longer exists, deleted.
    infrastructure: tuple[str, ...] = ()


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
    ) -> None:
        self._engine = engine
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
        pools = self._pool_facts()
        history = self._engine.find_managed(self._cluster, states=ALL_STATES)
        instances = [i for i in history if i.state in LIVE_STATES]
        doomed: dict[str, list[str]] = {}
        doomed_pools: set[str] = set()
        for instance in instances:
            reason = verdict(instance, pools, now, timedelta(seconds=self._interval))
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
        self._sample(history, pools, now, set(ids))
        removed = self._sweep_infrastructure(pools)
        return SweepReport(examined=len(instances), terminated=doomed, infrastructure=removed)

    def _sweep_infrastructure(self, pools: dict[str, PoolFacts]) -> tuple[str, ...]:
        """Launch templates and placement groups our tags give to a pool that is gone (its
        stack lost, or its release interrupted after the instances went)."""
        orphans = [o for o in self._engine.leftovers(self._cluster) if o.pool not in pools]
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
        return tuple(removed)

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
        phases: dict[str, int] = {phase: 0 for phase in tuple(Phase)}
        for facts in pools.values():
            phases[facts.phase] = phases.get(facts.phase, 0) + 1
        for phase, count in phases.items():
            self._metrics.pools.labels(phase=phase).set(count)
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
            except Exception:  # the backstop must keep sweeping
                log.exception("reaper sweep failed")
            self._stop.wait(self._interval)
