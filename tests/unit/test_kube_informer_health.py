"""An informer's health: a cache is trusted complete only while its list and watch work.

The reaper acts on what the pool cache does not hold, so a cache that never listed (RBAC
denied), whose watch is refused or failing, or that has gone quiet past its bound must say
so (`Informer.problem`)."""

from __future__ import annotations

from provisioner.kube.client import ObjectList
from provisioner.kube.errors import KubeForbidden, KubeUnavailable
from provisioner.kube.informer import Informer
from tests.unit.test_kube_informer import WAIT, FakeListWatch, Script, cm, event


class RefusedList(FakeListWatch):
    """Every list is refused, as for a service account without `list` on the resource."""

    def __init__(self) -> None:
        super().__init__([ObjectList([], "1")], [])
        self.refused = 0

    def list(self) -> ObjectList:
        self.refused += 1
        if self.refused >= 2:
            self.idle.set()
        raise KubeForbidden("gangnodepools is forbidden", status=403, reason="Forbidden")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def start(source: FakeListWatch, started: list[Informer], **options: object) -> Informer:
    informer = Informer(source, name="pools", backoff_initial=0.001, **options)  # type: ignore[arg-type]
    started.append(informer)
    informer.start()
    assert source.idle.wait(WAIT), "the informer never consumed its script"
    return informer


def test_a_refused_list_leaves_the_cache_unsynced_and_says_so(informers: list[Informer]) -> None:
    informer = start(RefusedList(), informers)
    assert not informer.has_synced()
    assert informer.problem() == "informer pools has not synced"


def test_a_refused_watch_after_sync_makes_the_cache_untrusted(informers: list[Informer]) -> None:
    source = FakeListWatch(
        [ObjectList([cm("a", "10")], "10")],
        [Script(raises=KubeForbidden("watch is forbidden", status=403, reason="Forbidden"))],
    )
    informer = start(source, informers)
    assert informer.has_synced()
    problem = informer.problem()
    assert problem is not None and "KubeForbidden" in problem and "forbidden" in problem


def test_a_server_error_makes_it_untrusted_until_a_watch_works_again(
    informers: list[Informer],
) -> None:
    source = FakeListWatch(
        [ObjectList([cm("a", "10")], "10")],
        [
            Script(raises=KubeUnavailable("500 internal error", status=500)),
            Script(event("MODIFIED", cm("a", "11"))),  # a watch that delivered, then ended
        ],
    )
    informer = start(source, informers)
    assert informer.problem() is None


def test_a_cache_with_no_list_or_watch_for_its_bound_is_untrusted(
    informers: list[Informer],
) -> None:
    clock = Clock()
    source = FakeListWatch([ObjectList([cm("a", "10")], "10")], [])
    informer = start(source, informers, stale_after=60.0, monotonic=clock)
    assert informer.problem() is None
    clock.now += 61
    assert informer.problem() == "informer pools: no list/watch completed for 60s"
