"""EC2's eventual consistency, and terminated instances that age out of its answers.

Each switch follows "Eventual consistency in the Amazon EC2 API" (EC2 Developer Guide):
the result of a call "might not be immediately visible to all subsequent commands"; right
after RunInstances, another call with the returned ids may answer
`InvalidInstanceID.NotFound`, which "does not mean the instance does not exist"; and
TerminateInstances answering `InvalidInstanceID.NotFound` "does not mean the instance was
or will be terminated". The page gives no duration and does not say which calls see it
when, so each behaviour is a switch with its own window, scoped (like every fault) to the
client whose access key signed the call, so the node simulator's reads are not affected:

- listing lag: a DescribeInstances without ids leaves out, for `seconds` after their launch,
  the last `share` of each just-launched set (share 1: the whole set; 0.5: half of it);
- describe lag: DescribeInstances BY ID answers NotFound for a just-launched id;
- terminate lag: TerminateInstances of a just-launched id answers NotFound and terminates
  nothing (the "TerminateInstances" API reference: a request that fails terminates none of
  its instances);
- reservation listing lag: for `seconds` after a PurchaseCapacityBlock took effect (on the
  emulator's clock, `now()`), DescribeCapacityReservations without reservation ids (with or
  without filters) leaves the new block out, so a look for a purchase whose answer was lost
  can find nothing though the block was bought. Reads by id and the control API's record
  still see it.

Always on, from the "TerminateInstances" API reference ("Terminated instances remain visible
after termination (for approximately one hour)"): an instance terminated more than
`TERMINATED_VISIBLE_SECONDS` ago (on the emulator's clock, `now()`, so `advance_clock` moves
it) is gone from listings, NotFound by id and NotFound to TerminateInstances. moto keeps it,
so EC2's own record of what ran and was billed (`instance_history`) survives.

`ConsistencySwitches` is a part of `EmulatorState` (which supplies `lock`, `clock` and
`now`). P1 (`install.call_action`) names the caller of each AWS call with `calling`.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Final

from devenv.emulator.model import EmulatorInputError

TERMINATED_VISIBLE_SECONDS: Final = 3600.0
LISTING: Final = "listing"
DESCRIBE_BY_ID: Final = "describe-by-id"
TERMINATE: Final = "terminate"
RESERVATION_LISTING: Final = "reservation-listing"
LAG_KINDS: Final = (LISTING, DESCRIBE_BY_ID, TERMINATE, RESERVATION_LISTING)
_MAX_LAG_SECONDS: Final = 300.0
# Launch times older than the longest lag are dropped once this many are kept.
_PRUNE_AT: Final = 20_000


@dataclass
class Lag:
    """For `seconds` after its launch, an instance is not yet visible to `kind` calls made
    by `client` (anyone's when None); a listing hides the last `share` of each launch."""

    kind: str
    seconds: float
    client: str | None = None
    share: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Launch:
    at: float
    index: int
    size: int


class ConsistencySwitches:
    """The eventual-consistency half of `EmulatorState`; `_clear_consistency_state` resets."""

    lock: threading.RLock
    clock: Callable[[], float]
    now: Callable[[], float]
    _consumed: list[dict[str, Any]]

    def _clear_consistency_state(self) -> None:
        self._lags: dict[str, Lag] = {}
        self._launched: dict[str, _Launch] = {}
        self._terminated_at: dict[str, float] = {}
        self._purchased_at: dict[str, float] = {}
        self._caller = threading.local()

    # --- who is calling --------------------------------------------------------------------
    @contextlib.contextmanager
    def calling(self, action: str, client: str | None) -> Iterator[None]:
        """Within this block, backend code is serving `action` for `client`."""
        previous = getattr(self._caller, "call", None)
        self._caller.call = (action, client)
        try:
            yield
        finally:
            self._caller.call = previous

    def _call(self) -> tuple[str | None, str | None]:
        call = getattr(self._caller, "call", None)
        return (None, None) if call is None else call

    # --- the switches ----------------------------------------------------------------------
    def set_lag(
        self, kind: str, seconds: float, client: str | None = None, share: float = 1.0
    ) -> Lag | None:
        """Arm (or, with 0 seconds, disarm) the `kind` lag: one of `LAG_KINDS`."""
        if kind not in LAG_KINDS:
            raise EmulatorInputError("kind", f"kind {kind!r} is not one of {LAG_KINDS}")
        if not 0 <= seconds <= _MAX_LAG_SECONDS:
            raise EmulatorInputError(
                "seconds", f"seconds {seconds} is not in [0, {_MAX_LAG_SECONDS:.0f}]"
            )
        if not 0 < share <= 1:
            raise EmulatorInputError("share", f"share {share} is not in (0, 1]")
        with self.lock:
            if not seconds:
                self._lags.pop(kind, None)
                return None
            lag = Lag(kind, float(seconds), client, float(share))
            self._lags[kind] = lag
            return lag

    def set_listing_lag(
        self, seconds: float, client: str | None = None, share: float = 1.0
    ) -> None:
        """Fresh launches stay out of DescribeInstances listings (calls without instance
        ids) for `seconds`: a crash-retry that looks for the set its lost answer launched
        finds none or part of it, as it may on EC2. 0 disarms."""
        self.set_lag(LISTING, seconds, client, share)

    def set_reservation_listing_lag(self, seconds: float, client: str | None = None) -> None:
        """A block bought less than `seconds` ago stays out of DescribeCapacityReservations
        listings (calls without ids). 0 disarms."""
        self.set_lag(RESERVATION_LISTING, seconds, client)

    @property
    def listing_lag(self) -> float:
        lag = self._lags.get(LISTING)
        return 0.0 if lag is None else lag.seconds

    def lag_views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [lag.as_dict() for lag in self._lags.values()]

    # --- what the patched backend asks -----------------------------------------------------
    def note_launched(self, instance_ids: list[str]) -> None:
        with self.lock:
            at = self.clock()
            if len(self._launched) > _PRUNE_AT:
                self._launched = {
                    i: x for i, x in self._launched.items() if at - x.at <= _MAX_LAG_SECONDS
                }
            size = len(instance_ids)
            for index, instance_id in enumerate(instance_ids):
                self._launched[instance_id] = _Launch(at, index, size)

    def note_purchased(self, reservation_id: str) -> None:
        with self.lock:
            self._purchased_at[reservation_id] = self.now()

    def note_terminated(self, instance_ids: list[str]) -> None:
        with self.lock:
            at = self.now()
            for instance_id in instance_ids:
                self._terminated_at.setdefault(instance_id, at)

    def _unseen(self, kind: str, instance_ids: set[str] | None = None) -> set[str]:
        """The just-launched ids the current caller's `kind` call does not see yet."""
        lag = self._lags.get(kind)
        if lag is None:
            return set()
        _, client = self._call()
        if lag.client is not None and lag.client != client:
            return set()
        cutoff = self.clock() - lag.seconds
        candidates = self._launched if instance_ids is None else instance_ids
        unseen = set()
        for instance_id in candidates:
            launch = self._launched.get(instance_id)
            if launch is None or launch.at <= cutoff:
                continue
            hidden = math.ceil(lag.share * launch.size)
            if launch.index >= launch.size - hidden:
                unseen.add(instance_id)
        if unseen:
            # Recorded like every consumed switch, so a test can show the lag bit.
            self._consumed.append(
                {"switch": "consistency-lag", "kind": kind, "ids": sorted(unseen), "by": client}
            )
        return unseen

    def unlisted_reservations(self) -> set[str]:
        """The bought blocks the current caller's DescribeCapacityReservations listing leaves
        out (the reservation listing lag)."""
        with self.lock:
            lag = self._lags.get(RESERVATION_LISTING)
            action, client = self._call()
            if lag is None or action != "DescribeCapacityReservations":
                return set()
            if lag.client is not None and lag.client != client:
                return set()
            cutoff = self.now() - lag.seconds
            unseen = {r for r, at in self._purchased_at.items() if at > cutoff}
            if unseen:
                self._consumed.append(
                    {
                        "switch": "consistency-lag",
                        "kind": RESERVATION_LISTING,
                        "ids": sorted(unseen),
                        "by": client,
                    }
                )
            return unseen

    def aged_out(self, instance_ids: set[str] | None = None) -> set[str]:
        """Instances terminated more than `TERMINATED_VISIBLE_SECONDS` ago."""
        if not self._terminated_at:
            return set()
        cutoff = self.now() - TERMINATED_VISIBLE_SECONDS
        candidates = self._terminated_at if instance_ids is None else instance_ids
        return {
            i for i in candidates if i in self._terminated_at and self._terminated_at[i] < cutoff
        }

    def hidden_from_listings(self) -> set[str]:
        """The instances a listing by the current caller leaves out."""
        with self.lock:
            return self._unseen(LISTING) | self.aged_out()

    def not_found_by_id(self, instance_ids: list[str]) -> list[str]:
        """The ids a DescribeInstances by id of the current caller answers NotFound for."""
        with self.lock:
            wanted = set(instance_ids)
            action, _ = self._call()
            unseen = (
                self._unseen(DESCRIBE_BY_ID, wanted) if action == "DescribeInstances" else set()
            )
            gone = unseen | self.aged_out(wanted)
            return [i for i in instance_ids if i in gone]

    def not_found_to_terminate(self, instance_ids: list[str]) -> list[str]:
        """The ids a TerminateInstances of the current caller answers NotFound for (and so
        terminates nothing of the request)."""
        with self.lock:
            wanted = set(instance_ids)
            action, _ = self._call()
            unseen = self._unseen(TERMINATE, wanted) if action == "TerminateInstances" else set()
            gone = unseen | self.aged_out(wanted)
            return [i for i in instance_ids if i in gone]
