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

Signed tokens (ownership proof, see ``cloud.ownership``). With the cluster's ownership key
a token is ``agp-<generation>-<digest16>-<mac>``: ``digest16`` is the first 16 hex digits
of the sha256 above and ``mac`` an HMAC-SHA256, keyed by the per-cluster secret only the
controller holds, over (cluster, pool name, generation, digest16). EC2 keeps the token on
what it launched (``DescribeInstances`` ``ClientToken``, ``DescribeFleets`` ``ClientToken``)
and nobody can change it afterwards, so a token whose MAC verifies proves this cluster's
controller launched it for that pool and generation — even once the pool, and with it
its UID, is gone. Without a key tokens are unsigned (``agp-<generation>-<digest32>``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from provisioner.api import constants as c

IAM_INSTANCE_PROFILE_NAME_MAX: Final = 128
CLIENT_TOKEN_MAX: Final = 64
_HASH_LEN: Final = 10
_TOKEN_HASH_LEN: Final = 32
FLEET_DISCRIMINATOR: Final = "fleet"
_DIGEST_LEN: Final = 16
_MAC_LEN: Final = 32
OWNERSHIP_KEY_MIN_BYTES: Final = 32
_SIGNED: Final = re.compile(r"^agp-(\d+)-([0-9a-f]{16})-([0-9a-f]{16,32})$")


@dataclass(frozen=True)
class OwnershipKey:
    """The per-cluster secret launch tokens are signed with (never logged: no repr)."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) < OWNERSHIP_KEY_MIN_BYTES:
            raise ValueError(
                f"the ownership key must hold at least {OWNERSHIP_KEY_MIN_BYTES} bytes, got "
                f"{len(self.secret)}: generate one with `head -c 32 /dev/urandom | base64`"
            )


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_MIN_TEXT_KEY: Final = 32


def read_ownership_key(path: Path | None) -> OwnershipKey | None:
    """The key in ``path`` (settings ``ownership.keyFile``), None when unset; a clear error
    naming the setting when the file cannot be read or is too short."""
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(
            f"ownership.keyFile {path} cannot be read ({err.strerror}): mount the ownership "
            "key Secret there, or unset ownership.keyFile"
        ) from err
    # A key typed or generated as text (`head -c 32 /dev/urandom | base64`, a Secret made
    # with --from-literal) may end in a newline that is not part of it; random bytes are the
    # key as they are (stripping would drop a byte that happens to be whitespace).
    text = raw.strip()
    secret = text if raw.isascii() and len(text) >= _MIN_TEXT_KEY else raw
    try:
        return OwnershipKey(secret)
    except ValueError as err:
        raise ValueError(f"ownership.keyFile {path}: {err}") from err


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


def client_token(
    pool_uid: str,
    generation: int,
    discriminator: str,
    *,
    key: OwnershipKey | None = None,
    cluster: str = "",
    pool: str = "",
) -> str:
    """The ClientToken for one launch request of one acquire generation (module docstring);
    signed for ``cluster`` and ``pool`` when given the cluster's ownership ``key``."""
    if not pool_uid:
        raise ValueError("a client token needs the pool's UID")
    if generation < 0:
        raise ValueError(f"acquire generation must be >= 0, got {generation}")
    digest = _sha256_hex(f"{pool_uid}/{generation}/{discriminator}")
    head = f"agp-{generation}-"
    if key is None:
        return head + digest[: min(_TOKEN_HASH_LEN, CLIENT_TOKEN_MAX - len(head))]
    if not cluster or not pool:
        raise ValueError("a signed client token needs the cluster and pool names")
    short = digest[:_DIGEST_LEN]
    room = CLIENT_TOKEN_MAX - len(head) - _DIGEST_LEN - 1
    return f"{head}{short}-{_mac(key, cluster, pool, generation, short)[: min(_MAC_LEN, room)]}"


def signed_generation(token: str | None, key: OwnershipKey, cluster: str, pool: str) -> int | None:
    """The acquire generation ``token`` was signed for, if this cluster's key signed it for
    ``cluster`` and ``pool``; None for any other token (unsigned, forged, another cluster's,
    another pool's)."""
    match = _SIGNED.match(token or "")
    if match is None or not cluster or not pool:
        return None
    generation, short, mac = int(match.group(1)), match.group(2), match.group(3)
    expected = _mac(key, cluster, pool, generation, short)[: len(mac)]
    return generation if hmac.compare_digest(expected, mac) else None


def _mac(key: OwnershipKey, cluster: str, pool: str, generation: int, short: str) -> str:
    # Newline-separated: cluster and pool names cannot hold one, so no two tuples collide.
    message = f"atomic-gang-launch\n{cluster}\n{pool}\n{generation}\n{short}"
    return hmac.new(key.secret, message.encode("utf-8"), hashlib.sha256).hexdigest()


def group_name(generation: int) -> str:
    """The acquisition group of a generation: the value of the group label and tag."""
    if generation < 0:
        raise ValueError(f"acquire generation must be >= 0, got {generation}")
    return f"gen-{generation}"
