"""A Job may name only a capacity reservation given to this cluster (and, when the
reservation names namespaces, to its namespace): refused at apply otherwise, naming the
annotation, the tag and the command that sets it; the tags as EC2 shows them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from botocore.stub import Stubber

from provisioner.api import constants as c
from provisioner.api.reservation_policy import (
    REASON_RESERVATION_NOT_OURS,
    REASON_RESERVATION_UNVERIFIED,
    ReservationLookupError,
    reservation_problem,
)
from provisioner.cloud.reservation_tags import Ec2ReservationTags
from provisioner.webhook.review import review
from tests.support.pools import pool_lookup
from tests.unit.test_cloud_helpers import World, emulated_aws
from tests.unit.test_webhook_review import GANG_ANNOTATIONS, GANG_LABELS, SETTINGS, job

pytestmark = pytest.mark.unit

CLUSTER = SETTINGS.cluster_name
OURS = "cr-0aaaaaaaaaaaaaaa1"  # tagged for this cluster, any namespace
TEAM_A = "cr-0aaaaaaaaaaaaaaa2"  # tagged for this cluster, namespaces team-a and team-a2
OTHER_CLUSTER = "cr-0aaaaaaaaaaaaaaa3"  # another cluster's
UNTAGGED = "cr-0aaaaaaaaaaaaaaa4"  # another team's, never given to a cluster
MISSING = "cr-0aaaaaaaaaaaaaaa5"


class FakeReservationTags:
    """Tags by reservation id; `failing` makes every call fail; `asked` records the ids."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, str]] = {
            OURS: {c.TAG_CLUSTER: CLUSTER},
            TEAM_A: {c.TAG_CLUSTER: CLUSTER, c.TAG_NAMESPACE: "team-a team-a2"},
            OTHER_CLUSTER: {c.TAG_CLUSTER: "staging", c.TAG_NAMESPACE: "team-a"},
            UNTAGGED: {"team": "vision"},
        }
        self.failing: str | None = None
        self.asked: list[str] = []

    def tags(self, reservation_id: str) -> Mapping[str, str] | None:
        self.asked.append(reservation_id)
        if self.failing is not None:
            raise ReservationLookupError(self.failing)
        return self.by_id.get(reservation_id)


@pytest.mark.parametrize(
    ("reservation_id", "namespace", "reason", "words"),
    [
        (OURS, "team-b", None, None),
        (TEAM_A, "team-a", None, None),
        (TEAM_A, "team-a2", None, None),
        (TEAM_A, "team-b", REASON_RESERVATION_NOT_OURS, "does not include this Job's namespace"),
        (OTHER_CLUSTER, "team-a", REASON_RESERVATION_NOT_OURS, "is tagged for 'staging'"),
        (UNTAGGED, "team-a", REASON_RESERVATION_NOT_OURS, "is not tagged for any cluster"),
        (MISSING, "team-a", REASON_RESERVATION_NOT_OURS, "EC2 knows no such reservation"),
    ],
)
def test_only_reservations_given_to_this_cluster_and_namespace_pass(
    reservation_id: str, namespace: str, reason: str | None, words: str | None
) -> None:
    problem = reservation_problem(reservation_id, CLUSTER, namespace, FakeReservationTags())
    if reason is None:
        assert problem is None
        return
    assert problem is not None and problem.reason == reason
    assert words is not None and words in problem.message
    # The fix: the tag and the command that sets it on this reservation.
    assert f"{c.TAG_CLUSTER}={CLUSTER}" in problem.message
    assert f"--resources {reservation_id}" in problem.message


def test_a_reservation_whose_tags_cannot_be_read_is_refused_not_trusted() -> None:
    down = FakeReservationTags()
    down.failing = "RequestLimitExceeded"
    problem = reservation_problem(OURS, CLUSTER, "team-a", down)
    assert problem is not None and problem.reason == REASON_RESERVATION_UNVERIFIED
    assert "could not say how it is tagged (RequestLimitExceeded)" in problem.message
    unchecked = reservation_problem(OURS, CLUSTER, "team-a", None)
    assert unchecked is not None and unchecked.reason == REASON_RESERVATION_UNVERIFIED


# --- the webhook, at kubectl apply -------------------------------------------------------
def _verdict(
    reservation_id: str, namespace: str, tags: FakeReservationTags | None
) -> dict[str, Any]:
    body = job(GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_CAPACITY_RESERVATION_ID: reservation_id})
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "namespace": namespace,
        "operation": "CREATE",
        "object": body,
    }
    admission = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    answer = review(
        {**admission, "request": request}, SETTINGS, pools=pool_lookup(), reservations=tags
    )
    return dict(answer["response"])


def test_webhook_refuses_another_teams_reservation_naming_the_field_and_the_fix() -> None:
    """One tenant cannot burn another's Capacity Block: an id this cluster was not given
    is refused at apply, and so is one given to other namespaces."""
    for reservation_id, namespace in ((UNTAGGED, "team-a"), (TEAM_A, "team-b")):
        verdict = _verdict(reservation_id, namespace, FakeReservationTags())
        assert verdict["allowed"] is False
        status = verdict["status"]
        assert status["code"] == 422
        causes = status["details"]["causes"]
        assert [x["field"] for x in causes] == [
            f"metadata.annotations[{c.ANN_CAPACITY_RESERVATION_ID}]"
        ]
        assert "aws ec2 create-tags" in status["message"]


def test_webhook_admits_a_reservation_of_this_cluster_and_fails_closed_without_ec2() -> None:
    assert _verdict(TEAM_A, "team-a", FakeReservationTags())["allowed"] is True
    assert _verdict(OURS, "anyone", FakeReservationTags())["allowed"] is True
    down = FakeReservationTags()
    down.failing = "UnauthorizedOperation"
    assert _verdict(OURS, "team-a", down)["allowed"] is False
    assert _verdict(OURS, "team-a", None)["allowed"] is False


def test_webhook_asks_ec2_nothing_for_a_job_without_a_reservation() -> None:
    tags = FakeReservationTags()
    body = job(GANG_LABELS, dict(GANG_ANNOTATIONS))
    request = {"uid": "u", "namespace": "team-a", "operation": "CREATE", "object": body}
    answer = review(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
        SETTINGS,
        pools=pool_lookup(),
        reservations=tags,
    )
    assert answer["response"]["allowed"] is True
    assert tags.asked == []


# --- the port, answered by EC2 (the emulator) -------------------------------------------
@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_ec2_says_how_each_reservation_is_tagged(world: World) -> None:
    tagged = world.emu.add_capacity_reservation(
        "p4d.24xlarge", "us-east-1a", 2, tags={c.TAG_CLUSTER: CLUSTER, c.TAG_NAMESPACE: "ml"}
    )
    bare = world.emu.add_capacity_reservation(
        "p5.48xlarge", "us-east-1a", 1, reservation_type="capacity-block"
    )
    port = Ec2ReservationTags(world.ec2)
    assert port.tags(tagged) == {c.TAG_CLUSTER: CLUSTER, c.TAG_NAMESPACE: "ml"}
    assert port.tags(bare) == {}
    assert port.tags(MISSING) is None
    assert reservation_problem(tagged, CLUSTER, "ml", port) is None
    refused = reservation_problem(bare, CLUSTER, "ml", port)
    assert refused is not None and "not tagged for any cluster" in refused.message


def test_ec2_errors_become_lookup_errors(world: World) -> None:
    with Stubber(world.ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", "RequestLimitExceeded")
        with pytest.raises(ReservationLookupError, match="RequestLimitExceeded"):
            Ec2ReservationTags(world.ec2).tags(OURS)
