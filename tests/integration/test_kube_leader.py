"""Leader election on a real coordination.k8s.io/v1 Lease: one leader among two electors,
fast hand-over on release, and a leader cut off from the apiserver stepping down."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from provisioner.kube.client import KubeClient
from provisioner.kube.leader import LeaderElector, LeaseLock
from provisioner.kube.resources import LEASES
from tests.support.waiting import when

if TYPE_CHECKING:  # imported at runtime by pytest_plugins, which must come first
    from tests.integration.conftest_kube import FlakyClient


LEASE, RENEW, RETRY = 3.0, 2.0, 0.25
DEADLINE = 20.0


class Replica:
    """An elector and the times its callbacks fired."""

    def __init__(self, client: KubeClient, namespace: str, lease: str, name: str) -> None:
        self.started_at: list[float] = []
        self.stopped_at: list[float] = []
        self.elector = LeaderElector(
            LeaseLock(client, namespace, lease, request_timeout=1.0),
            name,
            on_started_leading=lambda: self.started_at.append(time.monotonic()),
            on_stopped_leading=lambda: self.stopped_at.append(time.monotonic()),
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
        )

    def leads(self) -> bool:
        return self.elector.is_leader()


@pytest.fixture
def lease_name() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def running() -> Iterator[list[Replica]]:
    replicas: list[Replica] = []
    yield replicas
    for replica in replicas:
        replica.elector.stop(release=True)


def start(running: list[Replica], *replicas: Replica) -> None:
    for replica in replicas:
        running.append(replica)
        replica.elector.start()


def holder(client: KubeClient, namespace: str, name: str) -> str:
    lease = client.get(LEASES, name, namespace=namespace)
    return str(lease["spec"].get("holderIdentity") or "")


def test_two_electors_one_leader_and_release_hands_over_within_a_retry_period(
    kube_client: KubeClient, namespace: str, lease_name: str, running: list[Replica]
) -> None:
    a = Replica(kube_client, namespace, lease_name, "a")
    b = Replica(kube_client, namespace, lease_name, "b")
    start(running, a, b)
    when(lambda: a.leads() or b.leads(), DEADLINE, "a leader")
    leader, standby = (a, b) if a.leads() else (b, a)

    # For several lease durations, exactly one leads and the Lease names it.
    watch_until = time.monotonic() + 2 * LEASE
    while time.monotonic() < watch_until:
        assert leader.leads() and not standby.leads()
        time.sleep(0.05)
    assert holder(kube_client, namespace, lease_name) == leader.elector.identity
    assert standby.started_at == []

    released_at = time.monotonic()
    running.remove(leader)
    leader.elector.stop(release=True)
    took_over_at = when(standby.leads, DEADLINE, "the standby to lead")
    # One retry period, plus the requests of one attempt.
    assert took_over_at - released_at < RETRY + 1.0
    assert leader.stopped_at and leader.stopped_at[0] <= took_over_at
    lease = kube_client.get(LEASES, lease_name, namespace=namespace)
    assert lease["spec"]["holderIdentity"] == standby.elector.identity
    assert lease["spec"]["leaseTransitions"] == 1


def test_a_leader_whose_renewals_fail_stops_before_the_other_takes_over(
    kube_client: KubeClient,
    flaky_kube_client: FlakyClient,
    namespace: str,
    lease_name: str,
    running: list[Replica],
) -> None:
    cut_off = Replica(flaky_kube_client.client, namespace, lease_name, "cut-off")
    start(running, cut_off)
    when(cut_off.leads, DEADLINE, "the first elector to lead")
    standby = Replica(kube_client, namespace, lease_name, "standby")
    start(running, standby)
    # The standby has seen the Lease held, so after the cut it must wait the lease out.
    when(lambda: standby.elector.leader == "cut-off", DEADLINE, "the standby to see the leader")
    assert not standby.leads()

    cut_at = time.monotonic()
    flaky_kube_client.proxy.outage()
    stopped_at = when(lambda: not cut_off.leads(), DEADLINE, "the cut-off leader to step down")
    took_over_at = when(standby.leads, DEADLINE, "the standby to take over")

    assert stopped_at - cut_at <= RENEW + RETRY + 1.0
    assert cut_off.stopped_at and cut_off.stopped_at[0] < standby.started_at[0]
    assert took_over_at - cut_at >= LEASE - RENEW  # never before the lease could expire
    assert holder(kube_client, namespace, lease_name) == "standby"


def test_the_lease_record_is_well_formed(
    kube_client: KubeClient, namespace: str, lease_name: str, running: list[Replica]
) -> None:
    a = Replica(kube_client, namespace, lease_name, "a")
    start(running, a)
    when(a.leads, DEADLINE, "a to lead")
    first = kube_client.get(LEASES, lease_name, namespace=namespace)["spec"]
    when(
        lambda: (
            kube_client.get(LEASES, lease_name, namespace=namespace)["spec"]["renewTime"]
            != first["renewTime"]
        ),
        DEADLINE,
        "a renewal",
    )
    spec = kube_client.get(LEASES, lease_name, namespace=namespace)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 3
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["leaseTransitions"] == 0
    a.elector.stop(release=True)
    running.remove(a)
    released = kube_client.get(LEASES, lease_name, namespace=namespace)["spec"]
    assert "holderIdentity" not in released
    assert released["leaseDurationSeconds"] == 1
