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
from typing import Any, Final

from provisioner.api.reservation_policy import ReservationLookupError, ReservationTags
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import Ec2Api, build_clients, default_session
from provisioner.cloud.errors import error_code
from provisioner.cloud.tags import tags_to_dict

__all__ = ["Ec2ReservationTags", "reservation_tags_for"]

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


def reservation_tags_for(settings: Settings, session: Any | None = None) -> Ec2ReservationTags:
    """An `Ec2ReservationTags` on the controller's own credentials for the cluster's region,
    with the webhook's short timeouts (`images.image_owners_for` says why)."""
    clients = build_clients(
        session or default_session(),
        settings.defaults.region,
        settings.aws.endpoint_url,
        max_attempts=2,
        connect_timeout=2.0,
        read_timeout=4.0,
    )
    return Ec2ReservationTags(clients.ec2)
