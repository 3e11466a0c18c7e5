"""Leading never proceeds on an unsynced cache: the reconcilers, the executor and stack
recovery start only once every informer has synced, and not at all if the term ends
first. The reaper starts at once: it acts on nothing until its cache can be trusted."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from provisioner.api.settings import Settings
from provisioner.controllers.manager import ControllerParts, Manager
from provisioner.controllers.metrics import ControllerMetrics

WAIT = 10.0


class Informer:
    def __init__(self, name: str, synced: bool) -> None:
        self.name = name
        self.waited_on: list[threading.Thread] = []  # the threads that waited for the sync
        self._synced = threading.Event()
        if synced:
            self._synced.set()

    def sync(self) -> None:
        self._synced.set()

    def start(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        self.waited_on.append(threading.current_thread())
        return self._synced.wait(timeout)


class Part:
    """Any part the Manager starts and stops; records what was done to it, in one log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.started = threading.Event()

    def start(self) -> None:
        self.log.append(f"start {self.name}")
        self.started.set()

    def __getattr__(self, attr: str) -> Any:
        return lambda *a, **k: self.log.append(f"{attr} {self.name}")


def manager(
    informers: list[Informer], log: list[str], sync_wait: float = 0.05
) -> tuple[Manager, dict[str, Part]]:
    parts = {n: Part(n, log) for n in ("controller", "executor", "index", "reaper", "stacks")}
    settings = Settings.model_validate(
        {
            "clusterName": "c",
            "defaults": {
                "region": "us-east-1",
                "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
            },
            "pulumi": {"ephemeralState": True},
        }
    )
    built = Manager(
        settings,
        ControllerParts(
            informers=tuple(informers),  # type: ignore[arg-type]
            controllers=(parts["controller"],),  # type: ignore[arg-type]
            executor=parts["executor"],  # type: ignore[arg-type]
            index=parts["index"],  # type: ignore[arg-type]
            reaper=parts["reaper"],  # type: ignore[arg-type]
            stacks=parts["stacks"],  # type: ignore[arg-type]
            recorder=Part("recorder", log),  # type: ignore[arg-type]
        ),
        identity="test",
        metrics=ControllerMetrics(),
        sync_wait=sync_wait,
    )
    return built, parts


def test_synced_caches_start_everything_at_once() -> None:
    log: list[str] = []
    lead, parts = manager([Informer("pools", True), Informer("nodes", True)], log)
    lead.start_leading()
    assert lead.is_leading()
    assert parts["controller"].started.wait(WAIT) and "recover stacks" in log


def test_leading_starts_off_the_electors_thread_so_renewals_go_on_while_caches_sync() -> None:
    """`start_leading` runs on the elector's thread: it returns without waiting for a
    cache (a 60 s wait there once outlasted the 10 s renew deadline), and the wait happens
    on a thread of the term's own."""
    log: list[str] = []
    pools = Informer("gangnodepools", False)
    lead, parts = manager([pools], log, sync_wait=3600.0)
    returned = threading.Event()
    elector = threading.Thread(target=lambda: (lead.start_leading(), returned.set()), daemon=True)
    elector.start()
    assert returned.wait(WAIT), "start_leading held the elector's thread for the sync"
    assert lead.is_leading() and parts["reaper"].started.is_set()
    assert not parts["controller"].started.is_set()
    pools.sync()
    assert parts["controller"].started.wait(WAIT)
    assert pools.waited_on and elector not in pools.waited_on


def test_an_unsynced_cache_holds_the_reconcilers_until_it_syncs() -> None:
    log: list[str] = []
    pools = Informer("gangnodepools", False)
    lead, parts = manager([Informer("nodes", True), pools], log)
    lead.start_leading()
    assert lead.is_leading() and parts["reaper"].started.is_set()
    assert not parts["controller"].started.wait(0.3)
    assert "recover stacks" not in log and "start executor" not in log
    pools.sync()
    assert parts["controller"].started.wait(WAIT)
    assert log.index("recover stacks") < log.index("start controller")


@pytest.mark.parametrize("relead", [False, True])
def test_a_term_that_ends_before_the_sync_starts_nothing_late(relead: bool) -> None:
    log: list[str] = []
    pools = Informer("gangnodepools", False)
    lead, parts = manager([pools], log)
    lead.start_leading()
    lead.stop_leading()
    if relead:  # a new term whose own waiter is the one to start them, once
        lead.start_leading()
    pools.sync()
    if relead:
        assert parts["controller"].started.wait(WAIT)
        threading.Event().wait(0.3)  # the ended term's waiter has had its chance
        assert log.count("start controller") == 1
    else:
        assert not parts["controller"].started.wait(0.3)
        assert "recover stacks" not in log
