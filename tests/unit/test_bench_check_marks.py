"""How the benches read a check wave's Workload marks: whether the check was Ready before
quota, and whether Kueue admitted with the reservation (both conditions in one event)."""

from __future__ import annotations

from bench.watching import SAME_EVENT_SECONDS, admitted_with_reservation, ready_before_quota


def test_a_check_ready_before_the_reservation_is_told_apart_from_one_after() -> None:
    assert ready_before_quota({"checkReady": 1.0, "QuotaReserved": 1.2})
    assert not ready_before_quota({"checkReady": 1.3, "QuotaReserved": 1.2})
    assert not ready_before_quota({"QuotaReserved": 1.2})  # never Ready
    assert not ready_before_quota({"checkReady": 1.0})  # no quota seen: nothing to be before


def test_admitted_with_the_reservation_only_when_both_came_in_one_event() -> None:
    one_event = {"QuotaReserved": 2.0, "Admitted": 2.0 + SAME_EVENT_SECONDS / 10}
    assert admitted_with_reservation(one_event)
    assert not admitted_with_reservation({"QuotaReserved": 2.0, "Admitted": 2.03})
    assert not admitted_with_reservation({"Admitted": 2.0})  # no reservation seen
    assert not admitted_with_reservation({"QuotaReserved": 2.0})  # not admitted
