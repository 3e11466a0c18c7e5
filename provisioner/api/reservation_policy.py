"""Whether a Job may launch into the capacity reservation it names
(atomic-gang.k8s.aws/capacity-reservation-id): the rule and its words.

A reservation is paid for by whoever made it, whether used or not, and a Capacity Block is
bought for a window of days: a tenant naming another team's `cr-` id would burn capacity
that team paid for. So a Job may name only a reservation its owner has given to this
cluster, by EC2 tags on the reservation itself (DescribeCapacityReservations, `Tags`):

- `atomic-gang.k8s.aws/cluster=<cluster>`: the cluster may launch into it. The controller's
  IAM policy allows a launch into a reservation only with the same tag, so this rule holds
  even when the webhook is off; the webhook says it at `kubectl apply`, with the fix.
- `atomic-gang.k8s.aws/namespace=<ns> [<ns> ...]` (optional): only gang Jobs of those
  namespaces may name it. IAM cannot see a namespace; this check is the webhook's.

Tags are read live at every review (they are the owner's to change, and gang Jobs are few)
through the `ReservationTags` port; a port that cannot answer refuses the Job (fail closed),
as for an AMI. This module does no I/O; `provisioner.cloud.reservation_tags` answers the
port from EC2.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Protocol

from provisioner.api import constants as c
from provisioner.api.fields import CAPACITY_RESERVATION_PATTERN
from provisioner.api.problems import Problem

__all__ = [
    "REASON_RESERVATION_NOT_OURS",
    "REASON_RESERVATION_UNVERIFIED",
    "ReservationLookupError",
    "ReservationTags",
    "job_reservation_problem",
    "reservation_problem",
]

REASON_RESERVATION_NOT_OURS: Final = "ReservationNotTaggedForThisCluster"
REASON_RESERVATION_UNVERIFIED: Final = "ReservationTagsUnverified"


class ReservationLookupError(Exception):
    """EC2 could not say how the reservation is tagged (throttled, unreachable, denied)."""


class ReservationTags(Protocol):
    def tags(self, reservation_id: str) -> Mapping[str, str] | None:
        """The reservation's tags, or None when EC2 knows no such reservation; raises
        `ReservationLookupError` when EC2 does not answer."""
        ...


def _accepted(reservation_id: str, cluster: str, namespace: str) -> str:
    return (
        f"a reservation tagged {c.TAG_CLUSTER}={cluster} and, if it carries "
        f"{c.TAG_NAMESPACE}, naming this namespace ({namespace}); its owner tags it with "
        f"`aws ec2 create-tags --resources {reservation_id} --tags "
        f"Key={c.TAG_CLUSTER},Value={cluster}`, or remove the annotation to launch "
        "without a reservation"
    )


def reservation_problem(
    reservation_id: str, cluster: str, namespace: str, lookup: ReservationTags | None
) -> Problem | None:
    """None when a Job of `namespace` may launch into `reservation_id` on `cluster`;
    otherwise the refusal, naming the tag and how to set it. Without a way to ask EC2
    (`lookup` None) no reservation is trusted."""

    def refuse(detail: str, reason: str = REASON_RESERVATION_NOT_OURS) -> Problem:
        return Problem(
            key=c.ANN_CAPACITY_RESERVATION_ID,
            value=reservation_id,
            reason=reason,
            detail=detail,
            accepted=_accepted(reservation_id, cluster, namespace),
        )

    if lookup is None:
        return refuse(
            "its tags cannot be checked here (no EC2 access), and an unchecked reservation "
            "could be another team's",
            REASON_RESERVATION_UNVERIFIED,
        )
    try:
        tags = lookup.tags(reservation_id)
    except ReservationLookupError as err:
        return refuse(
            f"EC2 DescribeCapacityReservations could not say how it is tagged ({err}); try "
            "again, and nothing is launched until it can",
            REASON_RESERVATION_UNVERIFIED,
        )
    if tags is None:
        return refuse("EC2 knows no such reservation in the cluster's region")
    given = tags.get(c.TAG_CLUSTER)
    if given != cluster:
        said = "is not tagged for any cluster" if given is None else f"is tagged for {given!r}"
        return refuse(f"the reservation {said}, not for this cluster ({cluster})")
    allowed = tags.get(c.TAG_NAMESPACE)
    if allowed is not None and namespace not in allowed.split():
        return refuse(
            f"the reservation is tagged {c.TAG_NAMESPACE}={allowed!r}, which does not "
            f"include this Job's namespace ({namespace})"
        )
    return None


def job_reservation_problem(
    annotations: Mapping[str, str], cluster: str, namespace: str, lookup: ReservationTags | None
) -> Problem | None:
    """The refusal of a Job's capacity-reservation-id annotation, when it names a
    well-formed id not given to this cluster or namespace (a malformed one is the shape
    parser's to refuse)."""
    raw = annotations.get(c.ANN_CAPACITY_RESERVATION_ID, "").strip()
    if not re.fullmatch(CAPACITY_RESERVATION_PATTERN, raw):
        return None
    return reservation_problem(raw, cluster, namespace, lookup)
