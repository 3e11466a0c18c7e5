"""Which of a pool's tagged instances EC2's own record proves ours, before any is released.

Called by the GangNodePool reconciler's observe step (every live instance tagged with the
pool that is neither in its set nor of the launch in flight: a stray candidate) and by its
destroy action (whatever a listing by tag still finds). Tags only index candidates: anyone
allowed `ec2:CreateTags` can tag an instance as this pool's (DESIGN §11). A candidate is
released only when `ownership.prove` proves it ours, as the reaper requires: its launch
token (the instance's ClientToken, or its fleet's) derives from this pool object's UID, or
is signed with the cluster's ownership key for this cluster and pool name. Anything else is
left running and reported: a log line and a Warning Event on the pool when the set of such
instances changes, not on every pass.

Ids the pool's own status holds (its set, a release or rollback in progress) need no proof:
the pool wrote them from EC2's answer to its own launch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool
from provisioner.cloud.errors import CloudError
from provisioner.cloud.naming import OwnershipKey
from provisioner.cloud.ownership import fleet_of, prove
from provisioner.cloud.types import InstanceView
from provisioner.controllers.pool.steps import Unproven
from provisioner.controllers.ports import EngineOps
from provisioner.kube.events import EventRecorder, InvolvedObject
from provisioner.kube.resources import GANG_NODE_POOLS

log = logging.getLogger(__name__)


class PoolProofs:
    """Proves a pool's stray candidates ours (module docstring); thread-safe."""

    def __init__(
        self, engine: EngineOps, cluster: str, key: OwnershipKey | None, recorder: EventRecorder
    ) -> None:
        self._engine = engine
        self._cluster = cluster
        self._key = key
        self._recorder = recorder
        self._lock = threading.Lock()
        # A fleet's ClientToken never changes: each fleet is described once.
        self._fleet_tokens: dict[str, str | None] = {}
        # Per pool, the unproven ids last reported.
        self._reported: dict[str, frozenset[str]] = {}

    def releasable(
        self, pool: GangNodePool, live: Sequence[InstanceView]
    ) -> tuple[list[InstanceView], tuple[Unproven, ...]]:
        """Of the pool's live instances listed by tag, those a release may name: its own
        ids, those of the launch in flight (its marker's group: the engine adopts only what
        it proves), and every other one EC2 proves ours; and the unproven rest."""
        status = pool.status
        marker, held = status.launch_in_progress, status.release_in_progress
        own = {*status.instance_ids, *(held.instance_ids if held else ())}

        def candidate(view: InstanceView) -> bool:
            in_flight = marker is not None and view.managed.group == marker.group
            return view.instance_id not in own and not in_flight

        proven, unproven = self.split(pool, [v for v in live if candidate(v)])
        kept = {v.instance_id for v in proven}
        return [v for v in live if not candidate(v) or v.instance_id in kept], unproven

    def split(
        self, pool: GangNodePool, candidates: Sequence[InstanceView]
    ) -> tuple[list[InstanceView], tuple[Unproven, ...]]:
        """The candidates EC2 proves ours, and the rest with why each is unproven."""
        fleets = self._fleets(candidates)
        uid = pool.metadata.uid or pool.name
        proven: list[InstanceView] = []
        unproven: list[Unproven] = []
        for view in candidates:
            proof = prove(
                view, cluster=self._cluster, pool_uid=uid, key=self._key, fleet_tokens=fleets
            )
            if proof.reason is None:
                proven.append(view)
            else:
                unproven.append(Unproven(view.instance_id, proof.reason))
        return proven, tuple(unproven)

    def report(self, pool: GangNodePool, unproven: tuple[Unproven, ...]) -> None:
        """Log, and tell the pool's Events, when the unproven set changes."""
        ids = frozenset(u.instance_id for u in unproven)
        with self._lock:
            if self._reported.get(pool.name, frozenset()) == ids:
                return
            self._reported[pool.name] = ids
        if not ids:
            return
        listed = ", ".join(f"{u.instance_id} ({u.reason})" for u in unproven)
        message = (
            f"{len(ids)} instances carry pool {pool.name}'s tags but EC2's record does not "
            f"prove this controller launched them; left running, not released: {listed}."
        )
        log.warning("pool %s: %s", pool.name, message, extra={"pool": pool.name})
        self._recorder.warning(
            InvolvedObject.of(GANG_NODE_POOLS, pool.metadata),
            c.EventReason.UNPROVEN_INSTANCES,
            message,
        )

    def forget(self, pool: str) -> None:
        with self._lock:
            self._reported.pop(pool, None)

    def _fleets(self, candidates: Iterable[InstanceView]) -> dict[str, str | None]:
        with self._lock:
            unknown = [
                f
                for v in candidates
                if (f := fleet_of(v)) is not None and self._fleet_tokens.get(f) is None
            ]
            known = dict(self._fleet_tokens)
        if not unknown:
            return known
        try:
            answered = self._engine.fleet_tokens(unknown)
        except CloudError as err:
            # Unproven for this pass (nothing is released on a guess); the next pass asks.
            log.warning("fleets %s not described: %s", ", ".join(unknown), err)
            return known
        with self._lock:
            self._fleet_tokens.update(answered)
            return dict(self._fleet_tokens)


__all__ = ["PoolProofs"]
