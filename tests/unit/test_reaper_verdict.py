"""What the reaper terminates: only instances EC2's record proves ours, only while the pool
cache can be trusted, and then by the tags the launch wrote and the pool cache."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from provisioner.api.constants import Phase
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.naming import OwnershipKey, client_token
from provisioner.cloud.ownership import (
    FLEET_ID_TAG,
    NO_LAUNCH_TOKEN,
    NO_OWNERSHIP_KEY,
    TOKEN_NOT_OURS,
    Standing,
)
from provisioner.cloud.types import InstanceView, ManagedTags
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.controllers.reaper import (
    CACHE_NOT_TRUSTED,
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
LIMIT = timedelta(hours=168)  # limits.maxLifetime
CLUSTER = "prod"
KEY = OwnershipKey(b"k" * 32)
OTHER_KEY = OwnershipKey(b"o" * 32)  # another cluster's controller
SUBNET = "subnet-1"
POOLS = {
    "warm": PoolFacts(Phase.KEEP_WARM, claimed=False, uid="uid-warm"),
    "reused": PoolFacts(Phase.KEEP_WARM, claimed=True, uid="uid-reused"),
    "busy": PoolFacts(Phase.SATISFIED, claimed=True, uid="uid-busy"),
    # Its claim just ended; the pool has not yet written KeepWarm nor the new tag.
    "just-done": PoolFacts(Phase.SATISFIED, claimed=False, uid="uid-just-done"),
    # Warm again, its new window in the status; the tag still holds the window before.
    "warm-again": PoolFacts(
        Phase.KEEP_WARM,
        claimed=False,
        uid="uid-warm-again",
        keep_warm_until=NOW + timedelta(minutes=10),
    ),
}


def instance(
    pool: str | None,
    *,
    age: timedelta = timedelta(hours=1),
    max_lifetime: timedelta | None = timedelta(hours=4),
    keep_warm_until: datetime | None = None,
    token: str | None = None,
    instance_id: str = "i-0123456789abcdef0",
) -> InstanceView:
    return InstanceView(
        instance_id=instance_id,
        state="running",
        instance_type="p4d.24xlarge",
        availability_zone="us-east-1a",
        subnet_id=SUBNET,
        launch_time=NOW - age,
        private_dns_name=None,
        private_ip=None,
        client_token=token,
        tags={},
        managed=ManagedTags(
            managed=True,
            cluster=CLUSTER,
            pool=pool,
            group="gen-0",
            max_lifetime=max_lifetime,
            keep_warm_until=keep_warm_until,
        ),
    )


def signed(
    pool: str, uid: str | None = None, key: OwnershipKey = KEY, cluster: str = CLUSTER
) -> str:
    """The token the controller sends for `pool` (of UID `uid`), generation 0, in SUBNET."""
    return client_token(uid or f"uid-{pool}", 0, SUBNET, key=key, cluster=cluster, pool=pool)


@pytest.mark.parametrize(
    ("inst", "expected"),
    [
        (instance("busy"), None),
        (instance("gone-pool"), ORPHANED),
        (instance(None), ORPHANED),
        (instance("busy", age=timedelta(hours=4)), MAX_LIFETIME),
        (instance("busy", age=timedelta(hours=3, minutes=59)), None),
        # A tag removed or unreadable is the limit, not forever.
        (instance("busy", max_lifetime=None, age=timedelta(days=9)), MAX_LIFETIME),
        (instance("busy", max_lifetime=None, age=timedelta(days=6)), None),
        (instance("warm", keep_warm_until=NOW - timedelta(minutes=3)), KEEP_WARM_EXPIRED),
        # The pool reconciler releases on time; the reaper waits out a grace period.
        (instance("warm", keep_warm_until=NOW - timedelta(minutes=1)), None),
        (instance("warm", keep_warm_until=NOW + timedelta(minutes=5)), None),
        # A claim wins over the tag: a claim does not clear it.
        (instance("reused", keep_warm_until=NOW - timedelta(minutes=3)), None),
        # A set between a claim's end and its new tag carries the window before: its pool's
        # phase, or the pool's own later window, keeps it.
        (instance("just-done", keep_warm_until=NOW - timedelta(hours=3)), None),
        (instance("warm-again", keep_warm_until=NOW - timedelta(hours=3)), None),
        (instance("warm-again", keep_warm_until=NOW + timedelta(minutes=30)), None),
        # Max lifetime holds regardless of claims.
        (instance("reused", age=timedelta(hours=5)), MAX_LIFETIME),
    ],
)
def test_verdict_of_an_instance_of_the_pool_the_cache_holds(
    inst: InstanceView, expected: str | None
) -> None:
    assert verdict(inst, Standing.CURRENT, POOLS, NOW, GRACE, max_lifetime=LIMIT) == expected


@pytest.mark.parametrize(
    "inst",
    [
        instance("gone-pool"),
        instance("busy", age=timedelta(days=9)),
        instance("warm", keep_warm_until=NOW - timedelta(hours=1)),
    ],
    ids=["no-such-pool", "past-max-lifetime", "keep-warm-expired"],
)
def test_an_unproven_instance_never_goes_whatever_its_tags_say(inst: InstanceView) -> None:
    assert verdict(inst, Standing.UNPROVEN, POOLS, NOW, GRACE, max_lifetime=LIMIT) is None


@pytest.mark.parametrize(
    "tagged",
    [None, timedelta(hours=876000), timedelta(days=30)],
    ids=["tag-removed-or-unparsable", "876000h", "longer-than-the-limit"],
)
def test_a_rewritten_max_lifetime_tag_never_outlives_the_limit(tagged: timedelta | None) -> None:
    """The tag is mutable: anyone who may tag could remove it or write `876000h` on a
    proven instance. Its life is min(tag, limits.maxLifetime): past the limit it goes,
    before the limit it stays."""
    old = instance("busy", max_lifetime=tagged, age=LIMIT)
    assert verdict(old, Standing.CURRENT, POOLS, NOW, GRACE, max_lifetime=LIMIT) == MAX_LIFETIME
    young = instance("busy", max_lifetime=tagged, age=LIMIT - timedelta(minutes=1))
    assert verdict(young, Standing.CURRENT, POOLS, NOW, GRACE, max_lifetime=LIMIT) is None


def test_a_shorter_tag_still_holds_under_the_limit() -> None:
    """The Job's own max-lifetime (the tag) shortens the life; the limit only caps it."""
    inst = instance("busy", max_lifetime=timedelta(hours=4), age=timedelta(hours=4))
    assert verdict(inst, Standing.CURRENT, POOLS, NOW, GRACE, max_lifetime=LIMIT) == MAX_LIFETIME


def test_a_sweep_reaps_an_instance_whose_tag_was_removed_once_past_the_limit() -> None:
    """The same on a whole sweep: a proven instance with its tag gone, or rewritten to
    100 years, older than limits.maxLifetime, is terminated as past its max lifetime."""
    fleet = FakeEngine(
        [
            instance("busy", max_lifetime=None, age=LIMIT, token=signed("busy"), instance_id="i-a"),
            instance(
                "busy",
                max_lifetime=timedelta(hours=876000),
                age=LIMIT + timedelta(hours=1),
                token=signed("busy"),
                instance_id="i-b",
            ),
            instance("busy", max_lifetime=None, token=signed("busy"), instance_id="i-young"),
        ]
    )
    report = reaper(fleet).sweep()
    assert report.terminated == {MAX_LIFETIME: ["i-a", "i-b"]}
    assert sorted(fleet.released) == ["i-a", "i-b"]


def test_an_instance_launched_within_the_grace_is_not_an_orphan_yet() -> None:
    """The pool cache may lag the apiserver: a pool created a moment before its launch."""
    young = instance("new-pool", age=GRACE - timedelta(seconds=1))
    assert verdict(young, Standing.CURRENT, POOLS, NOW, GRACE, max_lifetime=LIMIT) is None
    assert verdict(young, Standing.EARLIER, POOLS, NOW, GRACE, max_lifetime=LIMIT) is None


def test_an_instance_of_an_earlier_pool_of_that_name_is_an_orphan() -> None:
    """Proven ours by its signature, not by the UID of the pool the cache holds: launched
    for a pool since deleted and recreated, whose new object owns none of it."""
    assert (
        verdict(instance("busy"), Standing.EARLIER, POOLS, NOW, GRACE, max_lifetime=LIMIT)
        == ORPHANED
    )


def reaper(
    engine: FakeEngine,
    *,
    pools: dict[str, PoolFacts] = POOLS,
    problem: str | None = None,
    key: OwnershipKey | None = KEY,
    metrics: ControllerMetrics | None = None,
    forget: list[str] | None = None,
) -> Reaper:
    return Reaper(
        engine,
        CLUSTER,
        lambda: pools,
        GRACE.total_seconds(),
        lambda: NOW,
        metrics or ControllerMetrics(),
        forget=(forget if forget is not None else []).append,
        cache_problem=lambda: problem,
        ownership_key=key,
        max_lifetime=LIMIT,
        stack_record=lambda _pool: frozenset(),
    )


def value(metrics: ControllerMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


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
            instance("busy", age=timedelta(hours=5), token=signed("busy"), instance_id="i-old"),
            instance(
                "warm",
                keep_warm_until=NOW - timedelta(minutes=3),
                token=signed("warm"),
                instance_id="i-warm",
            ),
            instance("reused", token=signed("reused"), instance_id="i-fine"),
            instance("gone", token=signed("gone"), instance_id="i-orphan"),
        ],
        failing={"release": throttled} if fail_release else None,
    )
    forgotten: list[str] = []
    sweeper = reaper(fleet, forget=forgotten)
    if fail_release:
        with pytest.raises(CloudError):
            sweeper.sweep()
    else:
        sweeper.sweep()
    assert sorted(fleet.released) == ["i-old", "i-orphan", "i-warm"]
    assert sorted(forgotten) == ["busy", "gone", "warm"]


@pytest.mark.parametrize(
    "problem",
    [
        "informer gangnodepools has not synced",
        "informer gangnodepools: last list/watch failed: KubeForbidden: forbidden",
    ],
)
def test_a_sweep_on_an_untrusted_pool_cache_terminates_nothing(problem: str) -> None:
    """An unsynced cache holds no pools, so every gang would look orphaned: the sweep says
    why, counts the skip, and still sets the billed gauge from EC2 alone."""
    fleet = FakeEngine(
        [
            instance("busy", token=signed("busy"), instance_id="i-1"),
            instance("busy", token=signed("busy"), instance_id="i-2"),
            instance("busy", age=timedelta(days=9), token=signed("busy"), instance_id="i-3"),
        ]
    )
    metrics = ControllerMetrics()
    report = reaper(fleet, pools={}, problem=problem, metrics=metrics).sweep()
    assert fleet.released == []
    assert report.terminated == {} and report.skipped == problem
    skipped = "atomic_gang_reaper_sweeps_skipped_total"
    assert value(metrics, skipped, reason=CACHE_NOT_TRUSTED) == 1
    assert value(metrics, "atomic_gang_instances_billed") == 3


def test_a_sweep_on_a_stale_but_non_empty_pool_cache_terminates_nothing() -> None:
    """A cache whose watch broke still holds the pools it last saw, and not the ones made
    since: a running gang of a newer pool would look orphaned, an old pool's set past its
    keep-warm tag would look expired while its new claim is not seen. Distrust is about the
    cache's freshness, not its size: nothing goes, whatever the cache holds."""
    fleet = FakeEngine(
        [
            # A pool made after the watch broke: not in the stale cache.
            instance("newer", token=signed("newer"), instance_id="i-newer-1"),
            instance("newer", token=signed("newer"), instance_id="i-newer-2"),
            # A pool the stale cache shows warm and unclaimed, its tag past.
            instance(
                "warm",
                keep_warm_until=NOW - timedelta(minutes=30),
                token=signed("warm"),
                instance_id="i-warm",
            ),
        ]
    )
    problem = "informer gangnodepools: last list/watch failed: KubeUnavailable: timed out"
    report = reaper(fleet, pools=POOLS, problem=problem).sweep()
    assert fleet.released == []
    assert report.terminated == {} and report.skipped == problem
    # The same world with a cache that can be trusted terminates both kinds: the test
    # would catch a reaper that only distrusts an empty cache.
    trusted = FakeEngine(list(fleet.fleet.values()))
    reaper(trusted, pools=POOLS).sweep()
    assert sorted(trusted.released) == ["i-newer-1", "i-newer-2", "i-warm"]


def test_instances_tagged_as_ours_but_launched_elsewhere_are_left_alone_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = FakeEngine(
        [
            # Launched by hand (a random or no ClientToken), then tagged as a gang of ours.
            instance("gone", token="my-own-token-1", instance_id="i-by-hand"),
            instance("busy", age=timedelta(days=9), instance_id="i-no-token"),
            # Another cluster's controller, with its own key, naming our cluster in tags.
            instance("gone", token=signed("gone", key=OTHER_KEY), instance_id="i-other"),
            # Ours, signed for pool "kept", re-tagged to name a pool that is gone.
            instance("gone", token=signed("kept"), instance_id="i-retagged"),
            # Ours, signed for another cluster name.
            instance("gone", token=signed("gone", cluster="staging"), instance_id="i-staging"),
        ]
    )
    metrics = ControllerMetrics()
    with caplog.at_level(logging.WARNING, logger="provisioner.controllers.reaper"):
        report = reaper(fleet, metrics=metrics).sweep()
    assert fleet.released == []
    assert report.unproven == {
        TOKEN_NOT_OURS: ["i-by-hand", "i-other", "i-retagged", "i-staging"],
        NO_LAUNCH_TOKEN: ["i-no-token"],
    }
    assert value(metrics, "atomic_gang_instances_unproven", reason=TOKEN_NOT_OURS) == 4
    assert value(metrics, "atomic_gang_instances_unproven", reason=NO_LAUNCH_TOKEN) == 1
    assert "i-by-hand" in caplog.text and "left alone" in caplog.text


def test_orphans_are_proven_by_signature_and_others_of_a_recreated_pool_go() -> None:
    fleet = FakeEngine(
        [
            instance("gone", token=signed("gone"), instance_id="i-orphan"),
            # A set of an earlier "busy" (another UID), the pool recreated since.
            instance("busy", token=signed("busy", uid="uid-busy-before"), instance_id="i-old"),
            instance("busy", token=signed("busy"), instance_id="i-current"),
        ]
    )
    report = reaper(fleet).sweep()
    assert report.terminated == {ORPHANED: ["i-orphan", "i-old"]}
    assert report.unproven == {}


def test_without_an_ownership_key_orphans_are_reported_not_terminated() -> None:
    unsigned = client_token("uid-gone", 0, SUBNET)
    fleet = FakeEngine(
        [
            instance("gone", token=unsigned, instance_id="i-orphan"),
            # The pool the cache holds still proves its own set by its UID.
            instance(
                "busy",
                age=timedelta(days=9),
                token=client_token("uid-busy", 0, SUBNET),
                instance_id="i-expired",
            ),
        ]
    )
    report = reaper(fleet, key=None).sweep()
    assert report.terminated == {MAX_LIFETIME: ["i-expired"]}
    assert report.unproven == {NO_OWNERSHIP_KEY: ["i-orphan"]}


def test_a_fleet_instance_is_proven_by_its_fleet_token_never_its_own() -> None:
    """EC2 does not document what ClientToken a fleet's instances carry; the fleet's own
    (DescribeFleets) is the proof, found by EC2's `aws:ec2:fleet-id` tag."""
    fleet_token = client_token("uid-gone", 0, "fleet", key=KEY, cluster=CLUSTER, pool="gone")
    ours = replace(instance("gone", instance_id="i-fleet-ours"), tags={FLEET_ID_TAG: "fleet-ours"})
    # A fleet launched outside the controller; its instances' own tokens look ours.
    foreign = replace(
        instance("gone", token=signed("gone"), instance_id="i-fleet-foreign"),
        tags={FLEET_ID_TAG: "fleet-foreign"},
    )
    fleet = FakeEngine([ours, foreign])
    fleet.fleets.update({"fleet-ours": fleet_token, "fleet-foreign": "their-token"})
    sweeper = reaper(fleet)
    report = sweeper.sweep()
    assert report.terminated == {ORPHANED: ["i-fleet-ours"]}
    assert report.unproven == {TOKEN_NOT_OURS: ["i-fleet-foreign"]}
    sweeper.sweep()  # a fleet's token never changes: described once
    assert sorted(fleet.fleets_described) == ["fleet-foreign", "fleet-ours"]
