"""What a series of admissions asks of the API server: its own count of the requests it
served, by verb and resource, and the share of them our product made, by component.

The API server's `/metrics` (`apiserver_request_total`) counts every client alike: Kueue,
the simulators, the bench, our controller. It has no label saying who asked, so our own
requests are counted where they are made: `ProductRequests` wraps the one method every
request of the product goes through (`KubeClient._call`; an informer's watch is opened
outside it, and is long-lived), in a bench that runs the controller and the webhook in its
own process, and attributes each to the thread that made it (a reconciler's workers, the
Event writer, an informer's list, the webhook).

Leases are renewed by the clock, not by admissions (our leader elector's, the API server's
own), and so is the webhook's certificate check: they are shown apart and left out of the
totals. Beside the requests, the controller's reconcile passes per admission, by reconciler
and result (`requeue` is a write that met a conflict), from its own metrics.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client as k8s
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from bench.stats import table
from provisioner.kube.client import KubeClient

# The verbs the API server reports for requests that change something.
MUTATING: Final = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
READS: Final = frozenset({"GET", "LIST"})
# Renewed every few seconds whatever the admissions do: not counted per admission.
BY_THE_CLOCK: Final = frozenset({"leases"})
# Our components that act by the clock (the webhook's certificate check).
CLOCK_COMPONENTS: Final = frozenset({"webhook-certs"})


def apiserver_requests(api: k8s.ApiClient) -> dict[str, float]:
    """The API server's own count of the requests it has served, by verb and resource
    (`apiserver_request_total`, keyed "VERB resource[/subresource]"), and of the watch
    events it has sent, by kind (`apiserver_watch_events_total`, "watch event <kind>")."""
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "apiserver_request_total":
                what = "/".join(x for x in (labels.get("resource"), labels.get("subresource")) if x)
                key = f"{labels.get('verb')} {what}"
            elif sample.name == "apiserver_watch_events_total":
                key = f"watch event {labels.get('resource') or labels.get('kind')}"
            else:
                continue
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Each counter's growth from `before` to `after` (those that grew)."""
    grown = {key: value - before.get(key, 0.0) for key, value in after.items()}
    return {key: value for key, value in grown.items() if value > 0}


# /api/v1/namespaces/default/events, /apis/g/v/gangnodepools/x/status, ...
_PATH: Final = re.compile(r"^/(?:api/[^/]+|apis/[^/]+/[^/]+)/(.*)$")


def request_key(method: str, path: str) -> str:
    """A request as the API server counts it: "VERB resource[/subresource]", a GET of a
    collection being a LIST."""
    found = _PATH.match(path.split("?", 1)[0])
    if found is None:
        return f"{method} {path}"  # /version, discovery
    parts = found.group(1).strip("/").split("/")
    if parts[0] == "namespaces" and len(parts) >= 3:
        parts = parts[2:]  # a namespaced resource (a GET of one namespace has two parts)
    resource, named, sub = parts[0], len(parts) > 1, parts[2] if len(parts) > 2 else ""
    verb = "LIST" if method == "GET" and not named else method
    return f"{verb} {resource}{'/' + sub if sub else ''}"


def component_of(thread: str) -> str | None:
    """Which part of the product a request came from, by its thread's name; None for the
    simulators' informers, which use the product's client too."""
    if re.match(r"informer-(jobsim|podsim|nodesim)", thread):
        return None
    if thread in CLOCK_COMPONENTS:
        return thread
    if thread.startswith("AnyIO worker") or thread.startswith("webhook"):
        return "webhook"
    if thread.startswith("informer-"):
        return "informers"
    return re.sub(r"(-worker)?-\d+$", "", thread).replace(" ", "_")


@dataclass
class ProductRequests:
    """Our product's requests, by component and "VERB resource", while `counting()`."""

    counts: Counter[tuple[str, str]]
    _lock: threading.Lock

    @classmethod
    def new(cls) -> ProductRequests:
        return cls(Counter(), threading.Lock())

    def snapshot(self) -> dict[str, float]:
        """ "component VERB resource" to the count so far."""
        with self._lock:
            return {f"{who} {what}": float(n) for (who, what), n in self.counts.items()}

    @contextmanager
    def counting(self) -> Iterator[None]:
        original = KubeClient._call

        def counted(client: KubeClient, method: str, path: str, *args: Any, **kw: Any) -> Any:
            who = component_of(threading.current_thread().name)
            if who is not None:
                with self._lock:
                    self.counts[(who, request_key(method, path))] += 1
            return original(client, method, path, *args, **kw)

        KubeClient._call = counted  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            KubeClient._call = original  # type: ignore[method-assign]


@dataclass(frozen=True)
class SeriesRequests:
    """What one series of `admissions` cost the API server (`apiserver`, every client) and
    what of it our product asked (`ours`, "component VERB resource"), each a counter's
    growth over the series."""

    admissions: int
    seconds: float
    apiserver: dict[str, float]
    ours: dict[str, float]
    # The controller's reconcile passes, "reconciler result" to their count.
    passes: dict[str, float] = field(default_factory=dict)

    def writes(self, *, ours: bool = False) -> dict[str, float]:
        """Mutating requests per admission, by resource (leases left out)."""
        return self._per_admission(MUTATING, ours)

    def reads(self, *, ours: bool = False) -> dict[str, float]:
        """GETs and LISTs per admission, by resource (leases left out)."""
        return self._per_admission(READS, ours)

    def by_the_clock(self) -> dict[str, float]:
        """The requests left out of the totals, per second: every client's to leases, and
        our components' that act by the clock."""
        out: dict[str, float] = {}
        seconds = max(self.seconds, 1e-9)
        for key, n in self.apiserver.items():
            verb, _, resource = key.partition(" ")
            if resource.split("/")[0] in BY_THE_CLOCK and verb in MUTATING | READS:
                out[key] = out.get(key, 0.0) + n / seconds
        for key, n in self.ours.items():
            if key.split(" ")[0] in CLOCK_COMPONENTS:
                out[key] = n / seconds
        return out

    def passes_per_admission(self) -> dict[str, float]:
        """Reconcile passes per admission by "reconciler result", and by reconciler."""
        out: dict[str, float] = {}
        for key, n in self.passes.items():
            reconciler = key.split(" ")[0]
            out[key] = n / self.admissions
            out[reconciler] = out.get(reconciler, 0.0) + n / self.admissions
        return out

    def by_component(self, verbs: frozenset[str]) -> dict[str, float]:
        """Our requests per admission of `verbs`, by "component VERB resource"."""
        out: dict[str, float] = {}
        for key, n in self.ours.items():
            who, verb, resource = key.split(" ", 2)
            if who in CLOCK_COMPONENTS or resource.split("/")[0] in BY_THE_CLOCK:
                continue
            if verb in verbs:
                out[key] = n / self.admissions
        return out

    def _per_admission(self, verbs: frozenset[str], ours: bool) -> dict[str, float]:
        source = self.ours if ours else self.apiserver
        out: dict[str, float] = {}
        for key, n in source.items():
            parts = key.split(" ")
            if ours and parts[0] in CLOCK_COMPONENTS:
                continue
            verb, resource = (parts[1], parts[2]) if ours else (parts[0], parts[-1])
            if verb not in verbs or not resource or resource.split("/")[0] in BY_THE_CLOCK:
                continue  # a non-resource URL (/metrics, /version) has no resource
            out[resource] = out.get(resource, 0.0) + n / self.admissions
        return out


@dataclass
class SeriesCounter:
    """Takes the API server's counters and ours before and after each series."""

    api: k8s.ApiClient
    product: ProductRequests
    # The controller's reconcile passes so far ("reconciler result" to a count), if known.
    passes: Callable[[], dict[str, float]] = dict
    series: dict[str, SeriesRequests] = field(default_factory=dict)

    @contextmanager
    def counting(self, name: str, admissions: int) -> Iterator[None]:
        # Read before the clock starts and after it stops: a scrape of the API server's
        # metrics is a request of its own, and not a small one.
        apiserver, ours, passes = (
            apiserver_requests(self.api),
            self.product.snapshot(),
            self.passes(),
        )
        started = time.monotonic()
        yield
        seconds = time.monotonic() - started
        self.series[name] = SeriesRequests(
            max(admissions, 1),
            seconds,
            spent(apiserver, apiserver_requests(self.api)),
            spent(ours, self.product.snapshot()),
            spent(passes, self.passes()),
        )


def controller_passes(registry: CollectorRegistry) -> dict[str, float]:
    """The controller's reconcile passes so far, "reconciler result" to a count, from its
    metrics registry (`controller_runtime_reconcile_total`)."""
    counts: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "controller_runtime_reconcile_total":
                key = f"{sample.labels['controller']} {sample.labels['result']}"
                counts[key] = sample.value
    return counts


def report(series: Mapping[str, SeriesRequests]) -> str:
    """Writes per admission by resource, every client's and ours side by side per series;
    our reads; our requests by component in each series; the leases apart."""
    names = list(series)
    if not names:
        return ""
    out = [
        "API server writes per admission (POST/PUT/PATCH/DELETE, by resource): every "
        "client's, and in brackets ours (controller and webhook); a series counts each "
        "Job's whole life, created to finished (and its pool warm again)",
        _table(names, {n: s.writes() for n, s in series.items()}, ours=series),
        "",
        "our GETs and LISTs per admission, by resource",
        _table(names, {n: s.reads(ours=True) for n, s in series.items()}),
    ]
    for name, counted in series.items():
        mine = counted.by_component(MUTATING | READS)
        if mine:
            rows = [[key, f"{n:.2f}"] for key, n in sorted(mine.items(), key=lambda kv: -kv[1])]
            out += ["", table((f"{name}: our requests by component", "per admission"), rows)]
    passes = {name: s.passes_per_admission() for name, s in series.items()}
    if any(passes.values()):
        out += [
            "",
            "our reconcile passes per admission, by reconciler and result (requeue: a write "
            "that met a conflict)",
            _table(names, passes, first="reconciler", total=False),
        ]
    clock = {name: s.by_the_clock() for name, s in series.items()}
    leases = sorted({key for per in clock.values() for key in per})
    if leases:
        parts = ", ".join(
            f"{key} {max(per.get(key, 0.0) for per in clock.values()):.2f}/s" for key in leases
        )
        out += ["", f"left out, renewed by the clock (every client, at most): {parts}"]
    return "\n".join(out)


def _table(
    names: list[str],
    per_series: Mapping[str, Mapping[str, float]],
    ours: Mapping[str, SeriesRequests] | None = None,
    *,
    first: str = "resource",
    total: bool = True,
) -> str:
    """One row per key of `per_series`' mappings, one column per series (with our share in
    brackets when `ours` is given), and a total row."""
    mine = {n: s.writes(ours=True) for n, s in ours.items()} if ours else {}
    keys = sorted({r for per in per_series.values() for r in per})
    rows = []
    for key in [*keys, "total"] if total else keys:
        row = [key]
        for name in names:
            per = per_series.get(name, {})
            value = sum(per.values()) if key == "total" else per.get(key, 0.0)
            cell = f"{value:.2f}"
            if ours:
                own = mine.get(name, {})
                value = sum(own.values()) if key == "total" else own.get(key, 0.0)
                cell += f" ({value:.2f})"
            row.append(cell)
        rows.append(row)
    return table((first, *names), rows)
