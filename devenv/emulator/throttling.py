"""EC2's API throttling, as documented: token buckets per account and region.

"Request throttling for the Amazon EC2 API" (EC2 Developer Guide): every API has a request
bucket (one token a call); a call that finds it empty is answered `RequestLimitExceeded`
(HTTP 503), and other APIs are unaffected. The page's default sizes and refill rates, by
category: non-mutating actions (Describe*, Get*, List*, Search*) 100 tokens refilled at 20
a second; mutating actions (everything else, RunInstances and CreateFleet among them) 50 at
5. RunInstances and TerminateInstances also spend a resource bucket, a token per instance:
1,000 refilled at 2 a second for RunInstances, 1,000 at 20 for TerminateInstances. A
RunInstances whose answer is an error launched nothing, so its instance tokens are given back
(the page counts instances launched; a refused launch launches none).

The emulator does not model the page's stricter bucket for unfiltered, unpaginated describes
(50 at 10): every Describe* gets the non-mutating bucket. The buckets are the account's:
every client's calls spend them, whichever access key signs. On by default;
`POST /_emulator/throttling` turns it off or changes the sizes, and `GET` reads the count of
calls it refused (by action) with the buckets as they stand.

`ThrottleBuckets` is a part of `EmulatorState` (which supplies `lock` and `clock`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from devenv.emulator.faults import Fault
from devenv.emulator.model import EmulatorInputError

_NON_MUTATING_PREFIXES: Final = ("Describe", "Get", "List", "Search")
# Actions with a resource bucket, and what each spends a token on.
RESOURCE_ACTIONS: Final = ("RunInstances", "TerminateInstances")


@dataclass(frozen=True)
class BucketSizes:
    """A bucket's size (tokens) and refill (tokens a second)."""

    size: float
    refill: float

    def checked(self, name: str) -> BucketSizes:
        if not (self.size >= 1 and self.refill > 0):
            raise EmulatorInputError(
                name, f"{name} needs size >= 1 and refill > 0, e.g. {{size: 50, refill: 5}}"
            )
        return self


@dataclass(frozen=True)
class ThrottlingConfig:
    """What the page documents, unless a test says otherwise."""

    enabled: bool = True
    mutating: BucketSizes = BucketSizes(50, 5)
    non_mutating: BucketSizes = BucketSizes(100, 20)
    resources: Mapping[str, BucketSizes] = field(
        default_factory=lambda: {
            "RunInstances": BucketSizes(1000, 2),
            "TerminateInstances": BucketSizes(1000, 20),
        }
    )

    def request_sizes(self, action: str) -> BucketSizes:
        return self.non_mutating if action.startswith(_NON_MUTATING_PREFIXES) else self.mutating

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "mutating": asdict(self.mutating),
            "non_mutating": asdict(self.non_mutating),
            "resources": {k: asdict(v) for k, v in self.resources.items()},
        }


@dataclass
class _Bucket:
    sizes: BucketSizes
    tokens: float
    at: float

    def level(self, now: float) -> float:
        if now > self.at:
            self.tokens = min(self.sizes.size, self.tokens + (now - self.at) * self.sizes.refill)
            self.at = now
        return self.tokens


def instances_of(action: str, query: Mapping[str, Any]) -> int:
    """The resource tokens a call spends: instances asked for (RunInstances' MaxCount) or
    named (TerminateInstances' InstanceId.N)."""
    if action == "RunInstances":
        raw = query.get("MaxCount") or ["1"]
        value = raw[0] if isinstance(raw, list) else raw
        return int(value) if str(value).isdigit() else 1
    if action == "TerminateInstances":
        return sum(1 for key in query if str(key).startswith("InstanceId."))
    return 0


class ThrottleBuckets:
    """The throttling half of `EmulatorState`; `_clear_throttling_state` resets it."""

    lock: threading.RLock
    clock: Callable[[], float]

    def _clear_throttling_state(self) -> None:
        self._throttling = ThrottlingConfig()
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}
        self._throttled: Counter[str] = Counter()

    def set_throttling(
        self,
        enabled: bool | None = None,
        mutating: BucketSizes | None = None,
        non_mutating: BucketSizes | None = None,
        resources: Mapping[str, BucketSizes] | None = None,
    ) -> dict[str, Any]:
        """Turn throttling on or off, or change bucket sizes (the buckets start full)."""
        unknown = set(resources or {}) - set(RESOURCE_ACTIONS)
        if unknown:
            raise EmulatorInputError(
                "resources", f"resources {sorted(unknown)} have no bucket; use {RESOURCE_ACTIONS}"
            )
        with self.lock:
            config = self._throttling
            self._throttling = replace(
                config,
                enabled=config.enabled if enabled is None else enabled,
                mutating=(mutating or config.mutating).checked("mutating"),
                non_mutating=(non_mutating or config.non_mutating).checked("non_mutating"),
                resources={
                    **config.resources,
                    **{k: v.checked(f"resources.{k}") for k, v in (resources or {}).items()},
                },
            )
            self._buckets.clear()
            return self.throttling_report()

    def throttling_report(self) -> dict[str, Any]:
        """The configuration, the calls refused (`throttled`, by action, and `total`)."""
        with self.lock:
            return {
                **self._throttling.as_dict(),
                "throttled": dict(self._throttled),
                "total": sum(self._throttled.values()),
            }

    def _bucket(self, region: str, kind: str, name: str, sizes: BucketSizes) -> _Bucket:
        key = (region, kind, name)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(sizes, sizes.size, self.clock())
        return bucket

    def take_throttle(self, region: str, action: str, instances: int) -> Fault | None:
        """Spend the call's tokens, or refuse it as EC2 does (nothing is spent then)."""
        with self.lock:
            config = self._throttling
            if not config.enabled or not action:
                return None
            now = self.clock()
            request = self._bucket(region, "request", action, config.request_sizes(action))
            sizes = config.resources.get(action)
            resource = self._bucket(region, "resource", action, sizes) if sizes else None
            if request.level(now) < 1 or (resource and resource.level(now) < instances):
                self._throttled[action] += 1
                return Fault(action, "RequestLimitExceeded", "Request limit exceeded.", 503, 0)
            request.tokens -= 1
            if resource is not None:
                resource.tokens -= instances
            return None

    def give_back(self, region: str, action: str, instances: int) -> None:
        """A launch that failed launched nothing: its instance tokens return."""
        with self.lock:
            bucket = self._buckets.get((region, "resource", action))
            if bucket is not None:
                bucket.tokens = min(bucket.sizes.size, bucket.tokens + instances)


def _sizes(body: Mapping[str, Any], name: str) -> BucketSizes | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise EmulatorInputError(name, f"{name} must be an object such as {{size: 50, refill: 5}}")
    size, refill = value.get("size"), value.get("refill")
    for v in (size, refill):
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise EmulatorInputError(name, f"{name} needs numbers size and refill")
    assert isinstance(size, int | float) and isinstance(refill, int | float)
    return BucketSizes(float(size), float(refill))


def throttling_from_body(state: ThrottleBuckets, body: Mapping[str, Any]) -> dict[str, Any]:
    """The control API's POST /_emulator/throttling."""
    enabled = body.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise EmulatorInputError("enabled", "enabled must be true or false")
    resources = body.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise EmulatorInputError("resources", "resources must map an action to its sizes")
    return state.set_throttling(
        enabled=enabled,
        mutating=_sizes(body, "mutating"),
        non_mutating=_sizes(body, "non_mutating"),
        resources={k: v for k in resources if (v := _sizes(resources, k)) is not None},
    )
