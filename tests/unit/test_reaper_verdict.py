"""What the reaper terminates, decided from tags and the pool cache alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from provisioner.api.constants import Phase
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.types import InstanceView, ManagedTags
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import (
    KEEP_WARM_EXPIRED,
    MAX_LIFETIME,
    ORPHANED,
    PoolFacts,
    Reaper,
    verdict,
)
from tests.support.fake_engine import FakeEngine

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=2)
POOLS = {
    "warm": PoolFacts(Phase.KEEP_WARM, claimed=False),
    "reused": PoolFacts(Phase.KEEP_WARM, claimed=True),
    "busy": PoolFacts(Phase.SATISFIED, claimed=True),
}


def instance(
    pool: str | None,
    *,
    age: timedelta = timedelta(hours=1),
    max_lifetime: timedelta | None = timedelta(hours=4),
    keep_warm_until: datetime | None = None,
) -> InstanceView:
    return InstanceView(
        instance_id="i-0123456789abcdef0",
        state="running",
        instance_type="p4d.24xlarge",
        availability_zone="us-east-1a",
        subnet_id="subnet-1",
        launch_time=NOW - age,
        private_dns_name=None,
        private_ip=None,
        client_token=None,
        tags={},
        managed=ManagedTags(
            managed=True,
            cluster="prod",
            pool=pool,
            group="gen-0",
            max_lifetime=max_lifetime,
            keep_warm_until=keep_warm_until,
        ),
    )


@pytest.mark.parametrize(
    ("inst", "expected"),
    [
        (instance("busy"), None),
        (instance("gone-pool"), ORPHANED),
        (instance(None), ORPHANED),
        (instance("busy", age=timedelta(hours=4)), MAX_LIFETIME),
        (instance("busy", age=timedelta(hours=3, minutes=59)), None),
        (instance("busy", max_lifetime=None, age=timedelta(days=9)), None),
        (instance("warm", keep_warm_until=NOW - timedelta(minutes=3)), KEEP_WARM_EXPIRED),
        # The pool reconciler releases on time; the reaper waits out a grace period.
        (instance("warm", keep_warm_until=NOW - timedelta(minutes=1)), None),
        (instance("warm", keep_warm_until=NOW + timedelta(minutes=5)), None),
        # A claim that arrived at the boundary wins over a tag not yet cleared.
        (instance("reused", keep_warm_until=NOW - timedelta(minutes=3)), None),
        # Max lifetime holds regardless of claims.
        (instance("reused", age=timedelta(hours=5)), MAX_LIFETIME),
    ],
)
def test_verdict(inst: InstanceView, expected: str | None) -> None:
    assert verdict(inst, POOLS, NOW, GRACE) == expected


def _with_id(view: InstanceView, instance_id: str) -> InstanceView:
    return replace(view, instance_id=instance_id)


@pytest.mark.parametrize("fail_release", [False, True])
def test_a_sweep_tells_the_index_which_pools_it_terminated_instances_of(
    fail_release: bool,
) -> None:
    """The pool reconciler reads a settled pool from a shared listing; a termination of
    ours must make that pool's next read fresh, or a claim could be admitted on a set the
    reaper just ended. Only pools it terminated instances of are told, failure or not."""
    throttled = CloudError(ErrorKind.RETRYABLE, None, "RequestLimitExceeded", "throttled")
    fleet = FakeEngine(
        [
            _with_id(instance("busy", age=timedelta(hours=5)), "i-old"),  # max lifetime
            _with_id(instance("warm", keep_warm_until=NOW - timedelta(minutes=3)), "i-warm"),
            _with_id(instance("reused"), "i-fine"),
            _with_id(instance(None), "i-untagged"),  # orphaned, no pool to tell
        ],
        failing={"release": throttled} if fail_release else None,
    )
    forgotten: list[str] = []
    reaper = Reaper(
        fleet,
        "prod",
        lambda: POOLS,
        GRACE.total_seconds(),
        lambda: NOW,
        ControllerMetrics(),
        forget=forgotten.append,
    )
    if fail_release:
        with pytest.raises(CloudError):
            reaper.sweep()
    else:
        reaper.sweep()
    assert sorted(fleet.released) == ["i-old", "i-untagged", "i-warm"]
    assert sorted(forgotten) == ["busy", "warm"]
