"""Whether EC2's own record proves an instance is one of this cluster's gang instances.

Called by the reaper (every live instance tagged for this cluster, before any verdict) and
by the engine's adoption after a crash (`Ec2Engine.acquire`). Tags say what an instance
claims to be; anyone allowed `ec2:CreateTags` can write them. The proof is what EC2 alone
wrote and nobody can change:

* the **launch token** EC2 keeps with what it launched: an instance's `ClientToken`
  (DescribeInstances) for RunInstances, and for an instance launched by an EC2 Fleet the
  fleet's `ClientToken` (DescribeFleets), found through the `aws:ec2:fleet-id` tag EC2
  itself puts on it (a caller cannot set or change an `aws:` key: "Tag your Amazon EC2
  resources", Tag restrictions). An instance's own ClientToken is never read for a fleet
  instance: what EC2 puts there for those is not documented.
* the token is the one `naming.client_token` derives. Two strengths of proof:
  - **current**: equal to the token of the pool the cache holds now, recomputed from its
    UID, the generation and the discriminator EC2 recorded (the instance's SubnetId, or
    "fleet") — the instance was launched for this very pool object;
  - **earlier**: the token's HMAC verifies under this cluster's ownership key for the
    cluster and the pool name on the instance — launched by this cluster's controller for
    a pool of that name that the cache does not hold (deleted, or deleted and recreated:
    another UID). This is how an orphan is proven ours once its pool's UID is gone.
* anything else is **unproven** and is never touched: launched outside the controller
  (by hand, by another cluster, by a forged tag), a fleet EC2 no longer describes, or an
  orphan while no ownership key is configured.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from provisioner.cloud import naming
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import ErrorKind, to_cloud_error
from provisioner.cloud.types import InstanceView

FLEET_ID_TAG: Final = "aws:ec2:fleet-id"
_GENERATION: Final = re.compile(r"^agp-(\d+)-")

# Why an instance is unproven (the `reason` label of `instances_unproven`).
NO_LAUNCH_TOKEN: Final = "no-launch-token"
FLEET_NOT_DESCRIBED: Final = "fleet-not-described"
TOKEN_NOT_OURS: Final = "token-not-ours"
NO_OWNERSHIP_KEY: Final = "no-ownership-key"


class Standing(StrEnum):
    CURRENT = "current"
    EARLIER = "earlier"
    UNPROVEN = "unproven"


@dataclass(frozen=True)
class Proof:
    standing: Standing
    # Why unproven; None when proven.
    reason: str | None = None
    # The acquire generation the token was made for (proven only).
    generation: int | None = None

    @property
    def proven(self) -> bool:
        return self.standing is not Standing.UNPROVEN


def fleet_of(instance: InstanceView) -> str | None:
    return instance.tags.get(FLEET_ID_TAG) or None


def prove(
    instance: InstanceView,
    *,
    cluster: str,
    pool_uid: str | None,
    key: naming.OwnershipKey | None,
    fleet_tokens: Mapping[str, str | None],
) -> Proof:
    """How EC2's record of ``instance`` proves it ours (module docstring). ``pool_uid`` is
    the UID of the pool named by the instance's pool tag, if the cache holds that pool;
    ``fleet_tokens`` maps fleet ids to the ClientToken DescribeFleets answered (None: not
    described)."""
    pool = instance.managed.pool or ""
    fleet = fleet_of(instance)
    if fleet is not None:
        token, discriminator = fleet_tokens.get(fleet), naming.FLEET_DISCRIMINATOR
        if not token:
            return Proof(Standing.UNPROVEN, FLEET_NOT_DESCRIBED)
    else:
        token, discriminator = instance.client_token, instance.subnet_id or ""
        if not token:
            return Proof(Standing.UNPROVEN, NO_LAUNCH_TOKEN)
    generation = token_generation(token)
    if pool and pool_uid and discriminator and generation is not None:
        expected = naming.client_token(
            pool_uid, generation, discriminator, key=key, cluster=cluster, pool=pool
        )
        if hmac.compare_digest(expected, token):
            return Proof(Standing.CURRENT, generation=generation)
    if key is None:
        return Proof(Standing.UNPROVEN, TOKEN_NOT_OURS if pool_uid else NO_OWNERSHIP_KEY)
    signed = naming.signed_generation(token, key, cluster, pool)
    if signed is None:
        return Proof(Standing.UNPROVEN, TOKEN_NOT_OURS)
    return Proof(Standing.EARLIER, generation=signed)


def token_generation(token: str) -> int | None:
    match = _GENERATION.match(token)
    return int(match.group(1)) if match else None


def describe_fleet_tokens(ec2: Ec2Api, fleet_ids: Iterable[str]) -> dict[str, str | None]:
    """Each fleet's ClientToken as DescribeFleets answers it; None for a fleet EC2 does not
    describe (unknown, or no longer kept), which proves nothing."""
    tokens: dict[str, str | None] = {}
    for fleet_id in dict.fromkeys(fleet_ids):
        # One id per call: EC2 may fail a whole call for one unknown id.
        try:
            fleets = ec2.describe_fleets(FleetIds=[fleet_id]).get("Fleets") or []
        except Exception as exc:
            err = to_cloud_error(exc, "DescribeFleets")
            if err.kind is ErrorKind.NOT_FOUND:
                tokens[fleet_id] = None
                continue
            raise err from exc
        found = next((f for f in fleets if f.get("FleetId") == fleet_id), None)
        tokens[fleet_id] = (found or {}).get("ClientToken") or None
    return tokens


__all__ = [
    "FLEET_ID_TAG",
    "FLEET_NOT_DESCRIBED",
    "NO_LAUNCH_TOKEN",
    "NO_OWNERSHIP_KEY",
    "TOKEN_NOT_OURS",
    "Proof",
    "Standing",
    "describe_fleet_tokens",
    "fleet_of",
    "prove",
    "token_generation",
]
