"""EC2 as the controllers reach it (`EngineOps`), in memory, for unit tests.

A stateful fake in the manner of Karpenter's `pkg/fake`: a fleet the test edits, the
cluster, instance-type, reservation and AMI answers it was built with, a record of every
listing, launch and release, switches that make calls fail, and `reset()` back to the
fleet it was built with. A launch joins the fleet as running; a release shuts its
instances down.

Listings answer as EC2 was when the call started, so a held listing (`hold`) is an old one
when it returns. A call named in `failing` raises its error every time, after acting (EC2
can terminate and still answer with an error), except a launch, which is N or nothing;
`fail_next` makes only the next listing raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from provisioner.api import constants as c
from provisioner.api.constants import MODE_FLEET
from provisioner.cloud.block_offerings import CapacityBlockOffering
from provisioner.cloud.engine_ops import EngineOps
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.leftovers import Leftover
from provisioner.cloud.ownership import FLEET_ID_TAG
from provisioner.cloud.types import (
    AmiChoice,
    ClusterInfo,
    InstanceTypeInfo,
    InstanceView,
    LaunchResult,
    LaunchSpec,
    Mode,
    ReleaseReport,
    Reservation,
    RootDevice,
    SubnetRef,
)
from provisioner.cloud.views import LIVE_STATES
from tests.support.fake_images import FakeImageOwners
from tests.support.fake_instance_types import FakeInstanceTypes
from tests.support.instance_views import managed_instance

CLUSTER: Final = ClusterInfo(
    name="demo",
    arn=None,
    status="ACTIVE",
    version="1.33",
    endpoint="https://demo.example",
    certificate_authority="Q0E=",
    service_cidr="10.100.0.0/16",
    vpc_id="vpc-1",
    subnet_ids=("subnet-1",),
    security_group_ids=("sg-1",),
)
M5: Final = InstanceTypeInfo("m5.large", ("x86_64",), False, 0, (0,))
AMI: Final = AmiChoice(ami_id="ami-1", source="explicit")
SUBNETS: Final = (SubnetRef("subnet-1", "us-east-1a"),)
# A held listing waits at most this long for the test to let it return.
HOLD_SECONDS: Final = 10.0


@dataclass(frozen=True)
class Listing:
    """One `find_managed` call, as asked."""

    cluster: str
    pool: str | None
    group: str | None
    states: tuple[str, ...]


class FakeEngine(EngineOps):
    """`EngineOps` over an in-memory fleet; see the module docstring. Subclassing the
    contract makes mypy (`make lint` checks tests/support) hold every method to it."""

    def __init__(
        self,
        fleet: Iterable[InstanceView] = (),
        *,
        cluster: ClusterInfo = CLUSTER,
        type_info: InstanceTypeInfo = M5,
        reservations: Mapping[str, Reservation] | None = None,
        ami: AmiChoice = AMI,
        subnets: tuple[SubnetRef, ...] = SUBNETS,
        adopts: bool = False,
        block_ends_at: datetime | None = None,
        failing: Mapping[str, Exception] | None = None,
        check_listing: Callable[[Listing], None] | None = None,
        offerings: Sequence[CapacityBlockOffering] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._initial = tuple(fleet)
        self.cluster_info = cluster
        self.type_info = type_info
        self.reservations = dict(reservations or {})
        # EC2's Capacity Block offerings, as DescribeCapacityBlockOfferings would list them.
        self.offerings = list(offerings)
        self.ami = ami
        self.subnets = subnets
        # A launch finds its set already in EC2 (a re-issued launch finds it by tag).
        self.adopts = adopts
        # The Capacity Block a launch lands on ends then (None: not on a block).
        self.block_ends_at = block_ends_at
        self.failing = dict(failing or {})
        # Called with each listing before it is answered: the test's rules for the caller.
        self.check_listing = check_listing
        # Who owns the AMIs a Job may name (`amiPolicy`); none known unless a test adds them.
        self._images = FakeImageOwners()
        self._instance_types = FakeInstanceTypes()
        self.fleet: dict[str, InstanceView] = {}
        # The ClientToken of each EC2 Fleet, as DescribeFleets would answer it.
        self.fleets: dict[str, str | None] = {}
        self.fleets_described: list[str] = []
        self.listings: list[Listing] = []
        self.launched: list[LaunchSpec] = []
        # The ClientToken each launch sent, as EC2 would have received it.
        self.sent_tokens: list[str] = []
        self.released: list[str] = []
        self.keep_warm_tags: list[tuple[tuple[str, ...], datetime | None]] = []
        # Capacity Blocks bought: (offering id, tags, reservation id), as EC2 records them.
        self.bought: list[tuple[str, dict[str, str], str]] = []
        self.fail_next: Exception | None = None
        self._holds: dict[str | None, tuple[threading.Event, threading.Event]] = {}
        self.reset()

    def reset(self) -> None:
        """The fleet as built; no records, holds or one-off failures."""
        with self._lock:
            self.fleet = {v.instance_id: v for v in self._initial}
            self.listings.clear()
            self.launched.clear()
            self.sent_tokens.clear()
            self.released.clear()
            self.keep_warm_tags.clear()
            self.bought.clear()
            self.fleets_described.clear()
            self.fail_next = None
            self._holds.clear()
            self.instance_types.reset()

    # --- what the test reads and edits -------------------------------------------------

    @property
    def calls(self) -> list[str | None]:
        """The pool each listing asked for (None: every pool)."""
        return [x.pool for x in self.listings]

    @property
    def listed_states(self) -> list[tuple[str, ...]]:
        return [x.states for x in self.listings]

    def set_state(self, instance_id: str, state: str) -> None:
        with self._lock:
            self.fleet[instance_id] = replace(self.fleet[instance_id], state=state)

    def hold(self, pool: str | None) -> tuple[threading.Event, threading.Event]:
        """The next listing of `pool` waits for the second event; the first says it began."""
        began, release = threading.Event(), threading.Event()
        with self._lock:
            self._holds[pool] = (began, release)
        return began, release

    def _fail(self, call: str) -> None:
        failure = self.failing.get(call)
        if failure is not None:
            raise failure

    # --- EngineOps ---------------------------------------------------------------------

    @property
    def images(self) -> FakeImageOwners:
        return self._images

    @images.setter
    def images(self, owners: FakeImageOwners) -> None:
        self._images = owners

    @property
    def instance_types(self) -> FakeInstanceTypes:
        return self._instance_types

    def find_managed(
        self,
        cluster: str,
        pool: str | None = None,
        group: str | None = None,
        states: Sequence[str] = LIVE_STATES,
    ) -> list[InstanceView]:
        listing = Listing(cluster, pool, group, tuple(states))
        if self.check_listing is not None:
            self.check_listing(listing)
        with self._lock:
            self.listings.append(listing)
            answer = [
                v
                for v in self.fleet.values()
                if v.managed.cluster == cluster
                and (pool is None or v.managed.pool == pool)
                and (group is None or v.managed.group == group)
                and v.state in states
            ]
            failure, self.fail_next = self.fail_next, None
            hold = self._holds.pop(pool, None)
        if hold is not None:
            hold[0].set()
            assert hold[1].wait(HOLD_SECONDS), "the test never released the listing"
        if failure is not None:
            raise failure
        self._fail("find_managed")
        return answer

    def describe(self, instance_ids: Sequence[str]) -> list[InstanceView]:
        with self._lock:
            found = [self.fleet[i] for i in instance_ids if i in self.fleet]
        self._fail("describe")
        return found

    def release(
        self, instance_ids: Sequence[str], *, known_since: datetime | None = None
    ) -> ReleaseReport:
        ids = tuple(instance_ids)
        with self._lock:
            self.released.extend(ids)
            for iid in ids:
                if iid in self.fleet:
                    self.fleet[iid] = replace(self.fleet[iid], state="shutting-down")
        self._fail("release")
        return ReleaseReport(ids, ids, (), (), (), (), ())

    def fleet_tokens(self, fleet_ids: Iterable[str]) -> dict[str, str | None]:
        """Each fleet's ClientToken, from `fleets` (None: EC2 does not describe it)."""
        ids = list(fleet_ids)
        self.fleets_described.extend(ids)
        self._fail("fleet_tokens")
        return {f: self.fleets.get(f) for f in ids}

    def set_keep_warm_tag(self, instance_ids: Sequence[str], until: datetime | None) -> None:
        self.keep_warm_tags.append((tuple(instance_ids), until))
        self._fail("set_keep_warm_tag")

    def leftovers(self, cluster: str, pool: str | None = None) -> list[Leftover]:
        self._fail("leftovers")
        return []

    def delete_leftovers(self, items: list[Leftover]) -> list[Leftover]:
        self._fail("delete_leftovers")
        return []

    def cluster(self, name: str) -> ClusterInfo:
        self._fail("cluster")
        return self.cluster_info

    def instance_type(self, instance_type: str) -> InstanceTypeInfo:
        self._fail("instance_type")
        return self.type_info

    def reservation(self, reservation_id: str) -> Reservation:
        self._fail("reservation")
        try:
            return self.reservations[reservation_id]
        except KeyError:
            raise CloudError(
                ErrorKind.CONFIG, None, "ReservationNotFound", f"{reservation_id} does not exist"
            ) from None

    def capacity_block_offerings(
        self,
        instance_type: str,
        count: int,
        duration_hours: int,
        *,
        earliest_start: datetime | None = None,
        latest_end: datetime | None = None,
    ) -> list[CapacityBlockOffering]:
        self._fail("capacity_block_offerings")
        return sorted(
            (
                o
                for o in self.offerings
                if (o.instance_type, o.instance_count, o.duration_hours)
                == (instance_type, count, duration_hours)
                and (earliest_start is None or o.start >= earliest_start)
                and (latest_end is None or o.end <= latest_end)
            ),
            key=lambda o: (o.start, o.upfront_fee, o.offering_id),
        )

    def purchase_capacity_block(self, offering_id: str, tags: Mapping[str, str]) -> str:
        """Bought as EC2 would (a failure set for "purchase_capacity_block" is raised
        before it takes effect; one for "purchase_capacity_block_answer" after: the block is
        bought and its answer lost)."""
        self._fail("purchase_capacity_block")
        reservation_id = f"cr-{len(self.bought) + 1:017x}"
        self.bought.append((offering_id, dict(tags), reservation_id))
        self._fail("purchase_capacity_block_answer")
        return reservation_id

    def bought_block(self, cluster: str, intent: str) -> str | None:
        self._fail("bought_block")
        found = [
            rid
            for _, tags, rid in self.bought
            if tags.get(c.TAG_PURCHASE_INTENT) == intent and tags.get(c.TAG_CLUSTER) == cluster
        ]
        return found[0] if found else None

    def root_device(self, image_id: str) -> RootDevice:
        """The EKS AMIs' root device and snapshot size (DescribeImages for AL2023)."""
        self._fail("root_device")
        return RootDevice(image_id, "/dev/xvda", 20)

    def resolve_ami(
        self,
        *,
        k8s_version: str,
        instance_type: str,
        variant: str,
        explicit_ami_id: str | None = None,
        instance_type_info: InstanceTypeInfo | None = None,
    ) -> AmiChoice:
        self._fail("resolve_ami")
        return self.ami

    def plan_subnets(
        self,
        *,
        mode: Mode,
        cluster: ClusterInfo,
        explicit_subnet_ids: Sequence[str] = (),
        availability_zones: Sequence[str] = (),
        addresses_needed: int = 0,
    ) -> tuple[SubnetRef, ...]:
        self._fail("plan_subnets")
        return self.subnets

    def launch_tokens(self, spec: LaunchSpec) -> tuple[str, ...]:
        return spec.request_tokens()

    def acquire(self, spec: LaunchSpec) -> LaunchResult:
        self.launched.append(spec)
        # The first request: the fleet's, or the first subnet's (where this fake lands).
        token = spec.request_tokens()[0]
        self.sent_tokens.append(token)
        self._fail("acquire")  # before anything runs: N or nothing
        ids = tuple(f"i-{n:017x}" for n in range(1, spec.count + 1))
        subnet = spec.subnets[0]
        # EC2's record of the launch token, where `ownership.prove` reads it: a fleet
        # instance names its fleet (whose ClientToken DescribeFleets answers), any other
        # keeps the token itself.
        fleet_id = f"fleet-{token[-12:]}" if spec.mode == MODE_FLEET else None
        with self._lock:
            if fleet_id is not None:
                self.fleets[fleet_id] = token
            for iid in ids:
                view = managed_instance(
                    iid, cluster=spec.cluster_name, pool=spec.pool_name, group=spec.group
                )
                self.fleet[iid] = replace(
                    view,
                    instance_type=spec.instance_type,
                    availability_zone=subnet.availability_zone,
                    subnet_id=subnet.subnet_id,
                    client_token=None if fleet_id else token,
                    tags={FLEET_ID_TAG: fleet_id} if fleet_id else {},
                )
        return LaunchResult(
            ids,
            spec.mode,
            spec.group,
            token,
            spec.subnets[:1],
            adopted=self.adopts,
            capacity_block_ends_at=self.block_ends_at,
        )
