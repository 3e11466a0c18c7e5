"""Names and idempotency tokens the engine derives, all deterministic.

Called by the engine (client tokens, group names), by the GangNodePool reconciler and the
bootstrap program (instance-profile name), and by the node simulator's tests. Nothing here
talks to AWS.

Client-token scheme (DESIGN §4.2). A token is ``agp-<generation>-<hex>`` where ``hex`` is a
sha256 over (pool UID, acquire generation, discriminator):

* fleet mode sends one request per generation; its discriminator is ``"fleet"``.
* runinstances mode sends one request per subnet in the sweep; the discriminator is the
  **subnet id**. EC2 ties a token to the parameters of the request that succeeded with it and
  asks that a token not be reused for a different request; a launch in the next subnet after
  a capacity error is a different request. Keying on the id (not the position in the sweep)
  keeps a token tied to its request even if the subnet list is rediscovered in another
  order after a restart, so a crash-retry that reaches the subnet that had succeeded sends
  the same token and gets the same reservation back. The sweep also adopts, before sending
  anything, a full set already tagged with this generation's group (see ``engine``), which
  closes the window where an earlier subnet has gained capacity since the first pass.
"""

from __future__ import annotations

import hashlib
from typing import Final

from provisioner.api import constants as c

IAM_INSTANCE_PROFILE_NAME_MAX: Final = 128
CLIENT_TOKEN_MAX: Final = 64
_HASH_LEN: Final = 10
_TOKEN_HASH_LEN: Final = 32
FLEET_DISCRIMINATOR: Final = "fleet"


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def role_name_from_arn(role_arn: str) -> str:
    """``arn:aws:iam::123:role/path/to/name`` -> ``name`` (IAM role names exclude paths)."""
    if not role_arn.startswith("arn:") or ":role/" not in role_arn:
        raise ValueError(f"{role_arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/...)")
    name = role_arn.rsplit("/", 1)[-1]
    if not name:
        raise ValueError(f"{role_arn!r} has an empty role name")
    return name


def instance_profile_name(cluster_name: str, role_name: str) -> str:
    """``atomic-gang-instance-profile-<cluster>-<role>``, cut to IAM's 128 characters.

    When too long, keep a prefix and end with ``-`` plus the first 10 hex digits of the full
    name's sha256, so two long names that share a prefix still differ.
    """
    full = f"{c.INSTANCE_PROFILE_PREFIX}{cluster_name}-{role_name}"
    if len(full) <= IAM_INSTANCE_PROFILE_NAME_MAX:
        return full
    keep = IAM_INSTANCE_PROFILE_NAME_MAX - _HASH_LEN - 1
    return f"{full[:keep]}-{_sha256_hex(full)[:_HASH_LEN]}"


def client_token(pool_uid: str, generation: int, discriminator: str) -> str:
    """The ClientToken for one launch request of one acquire generation (module docstring)."""
    if not pool_uid:
        raise ValueError("a client token needs the pool's UID")
    if generation < 0:
        raise ValueError(f"acquire generation must be >= 0, got {generation}")
    digest = _sha256_hex(f"{pool_uid}/{generation}/{discriminator}")
    head = f"agp-{generation}-"
    return head + digest[: min(_TOKEN_HASH_LEN, CLIENT_TOKEN_MAX - len(head))]


def group_name(generation: int) -> str:
    """The acquisition group of a generation: the value of the group label and tag."""
    if generation < 0:
        raise ValueError(f"acquire generation must be >= 0, got {generation}")
    return f"gen-{generation}"
