"""How a capacity reservation is tagged, as EC2 says: the `ReservationTags` port of
`api.reservation_policy`, over DescribeCapacityReservations.

Called by the Job webhook (at `kubectl apply`) through `api.reservation_policy`.
"DescribeCapacityReservations" (EC2 API Reference): `CapacityReservationIds=[id]` answers
the reservation with its `Tags`, or `InvalidCapacityReservationId.NotFound` (`.Malformed`
for an id of the wrong form). Tags are the reservation owner's to change, so nothing is
kept: every review reads them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from provisioner.api.reservation_policy import ReservationLookupError, ReservationTags
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import error_code
from provisioner.cloud.tags import tags_to_dict

__all__ = ["Ec2ReservationTags"]

_NOT_FOUND: Final = frozenset(
    {"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"}
)


class Ec2ReservationTags(ReservationTags):
    """`ReservationTags` answered by EC2 at every call."""

    def __init__(self, ec2: Ec2Api) -> None:
        self._ec2 = ec2

    def tags(self, reservation_id: str) -> Mapping[str, str] | None:
        try:
            found = self._ec2.describe_capacity_reservations(
                CapacityReservationIds=[reservation_id]
            ).get("CapacityReservations")
        except Exception as exc:
            if error_code(exc) in _NOT_FOUND:
                return None
            raise ReservationLookupError(f"{error_code(exc) or type(exc).__name__}") from exc
        mine = [r for r in found or () if r.get("CapacityReservationId") == reservation_id]
        return tags_to_dict(mine[0].get("Tags")) if mine else None
