"""The launch facts' reads kept between passes (`cloud.kept_reads`), alone and in the engine."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.cloud.engine import Ec2Engine
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.kept_reads import KeptReads
from tests.unit.test_cloud_helpers import CLUSTER, World, emulated_aws

pytestmark = pytest.mark.unit


class Reads:
    """A read that answers with how many times it was made, or raises when told to."""

    def __init__(self) -> None:
        self.made = 0
        self.failing = False

    def __call__(self) -> int:
        self.made += 1
        if self.failing:
            raise CloudError(ErrorKind.RETRYABLE, "Throttling", "Throttled", "slow down")
        return self.made


def test_an_immutable_answer_is_read_once() -> None:
    reads = Reads()
    kept = KeptReads()
    assert kept.immutable("t", reads) == 1
    assert kept.immutable("t", reads) == 1 and reads.made == 1
    assert kept.immutable("other", reads) == 2


def test_an_error_is_never_kept() -> None:
    reads = Reads()
    kept = KeptReads()
    reads.failing = True
    with pytest.raises(CloudError):
        kept.immutable("c", reads)
    reads.failing = False
    assert kept.immutable("c", reads) == 2


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def _count_calls(world: World) -> Counter[str]:
    calls: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    for client in (world.clients.ec2, world.clients.eks, world.clients.ssm):
        client.meta.events.register("before-call.*.*", count)  # type: ignore[attr-defined]
    return calls


def test_a_wave_of_passes_asks_for_the_type_and_the_image_once(world: World) -> None:
    """Ten passes' launch facts in a moment: one DescribeInstanceTypes and one DescribeImages
    (they never change); the cluster and the recommended AMI each pass (they may)."""
    engine, calls = Ec2Engine(world.clients, world.clock), _count_calls(world)

    def one_pass() -> None:
        cluster = engine.cluster(CLUSTER)
        info = engine.instance_type("p4d.24xlarge")
        ami = engine.resolve_ami(
            k8s_version=cluster.version,
            instance_type="p4d.24xlarge",
            variant="nvidia",
            instance_type_info=info,
        )
        engine.root_device(ami.ami_id)

    for _ in range(10):
        one_pass()
    assert calls == Counter(
        {"DescribeCluster": 10, "DescribeInstanceTypes": 1, "GetParameter": 10, "DescribeImages": 1}
    )
