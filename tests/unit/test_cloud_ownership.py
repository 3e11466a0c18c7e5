"""The proof that an instance is ours (`cloud.ownership`) and the signed launch tokens it
rests on (`naming.client_token`): what verifies, and every way a claim fails to."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.cloud import naming
from provisioner.cloud.naming import OwnershipKey, client_token, signed_generation
from provisioner.cloud.ownership import (
    FLEET_ID_TAG,
    FLEET_NOT_DESCRIBED,
    NO_LAUNCH_TOKEN,
    NO_OWNERSHIP_KEY,
    TOKEN_NOT_OURS,
    Proof,
    Standing,
    prove,
)
from provisioner.cloud.types import InstanceView, ManagedTags

pytestmark = pytest.mark.unit

KEY = OwnershipKey(b"s" * 32)
CLUSTER = "prod"
POOL = "train"
UID = "8d5c2a4e-uid"
SUBNET = "subnet-0a"


def view(token: str | None, *, pool: str | None = POOL, subnet: str = SUBNET) -> InstanceView:
    return InstanceView(
        instance_id="i-1",
        state="running",
        instance_type="p5.48xlarge",
        availability_zone="us-east-1a",
        subnet_id=subnet,
        launch_time=None,
        private_dns_name=None,
        private_ip=None,
        client_token=token,
        tags={},
        managed=ManagedTags(True, CLUSTER, pool, "gen-3", max_lifetime=None, keep_warm_until=None),
    )


def ours(generation: int = 3, discriminator: str = SUBNET, **kw: str) -> str:
    fields = {"cluster": CLUSTER, "pool": POOL, **kw}
    return client_token(UID, generation, discriminator, key=KEY, **fields)


def proof(
    inst: InstanceView,
    uid: str | None = UID,
    key: OwnershipKey | None = KEY,
    fleets: dict[str, str | None] | None = None,
) -> Proof:
    return prove(inst, cluster=CLUSTER, pool_uid=uid, key=key, fleet_tokens=fleets or {})


def test_a_signed_token_fits_ec2s_limit_and_verifies_only_for_its_cluster_and_pool() -> None:
    token = client_token(UID, 10**12, "subnet-0123456789abcdef0", key=KEY, cluster="c", pool="p")
    assert len(token) <= naming.CLIENT_TOKEN_MAX
    assert signed_generation(token, KEY, "c", "p") == 10**12
    assert signed_generation(token, KEY, "c", "q") is None
    assert signed_generation(token, KEY, "d", "p") is None
    assert signed_generation(token, OwnershipKey(b"t" * 32), "c", "p") is None
    # One digit changed in the MAC, or in the generation it covers.
    assert signed_generation(token[:-1] + ("0" if token[-1] != "0" else "1"), KEY, "c", "p") is None
    assert signed_generation(token.replace(f"agp-{10**12}-", "agp-7-"), KEY, "c", "p") is None
    # Idempotency is kept: one token per (pool UID, generation, request).
    assert token == client_token(
        UID, 10**12, "subnet-0123456789abcdef0", key=KEY, cluster="c", pool="p"
    )
    assert token != client_token(
        "other-uid", 10**12, "subnet-0123456789abcdef0", key=KEY, cluster="c", pool="p"
    )


@pytest.mark.parametrize(
    ("inst", "uid", "key", "expected"),
    [
        # The set of the pool the cache holds: its UID recomputes the token.
        (view(ours()), UID, KEY, Proof(Standing.CURRENT, generation=3)),
        (view(client_token(UID, 3, SUBNET)), UID, None, Proof(Standing.CURRENT, generation=3)),
        # The pool is gone: the signature alone proves it.
        (view(ours()), None, KEY, Proof(Standing.EARLIER, generation=3)),
        # The pool was recreated (another UID): ours, but of the earlier pool.
        (view(ours()), "new-uid", KEY, Proof(Standing.EARLIER, generation=3)),
        # Launched in another subnet than the one its token was made for.
        (view(ours(), subnet="subnet-0b"), UID, KEY, Proof(Standing.EARLIER, generation=3)),
        (view(None), UID, KEY, Proof(Standing.UNPROVEN, NO_LAUNCH_TOKEN)),
        (view("terraform-1234"), UID, KEY, Proof(Standing.UNPROVEN, TOKEN_NOT_OURS)),
        (
            view("agp-3-0123456789abcdef-00000000000000000000000000000000"),
            None,
            KEY,
            Proof(Standing.UNPROVEN, TOKEN_NOT_OURS),
        ),
        (view(ours(pool="other")), None, KEY, Proof(Standing.UNPROVEN, TOKEN_NOT_OURS)),
        (view(ours(), pool=None), None, KEY, Proof(Standing.UNPROVEN, TOKEN_NOT_OURS)),
        (view(ours()), None, None, Proof(Standing.UNPROVEN, NO_OWNERSHIP_KEY)),
        (view(client_token("x", 3, SUBNET)), UID, None, Proof(Standing.UNPROVEN, TOKEN_NOT_OURS)),
    ],
    ids=[
        "current-signed",
        "current-unsigned",
        "orphan-signed",
        "recreated-pool",
        "other-subnet",
        "no-token",
        "foreign-token",
        "forged-mac",
        "signed-for-another-pool",
        "pool-tag-removed",
        "orphan-without-key",
        "unsigned-foreign-uid",
    ],
)
def test_prove(
    inst: InstanceView, uid: str | None, key: OwnershipKey | None, expected: Proof
) -> None:
    assert proof(inst, uid, key) == expected


def test_a_fleet_instance_is_proven_by_the_fleet_ec2_tagged_it_with() -> None:
    fleet_token = ours(discriminator=naming.FLEET_DISCRIMINATOR)
    inst = replace(view(ours()), tags={FLEET_ID_TAG: "fleet-1"})
    assert proof(inst, fleets={"fleet-1": fleet_token}).standing is Standing.CURRENT
    assert proof(inst, uid=None, fleets={"fleet-1": fleet_token}).standing is Standing.EARLIER
    # Its own ClientToken (ours here) is never the proof of a fleet instance.
    assert proof(inst, fleets={"fleet-1": None}) == Proof(Standing.UNPROVEN, FLEET_NOT_DESCRIBED)
    assert proof(inst, fleets={"fleet-1": "someone-else"}).reason == TOKEN_NOT_OURS


def test_the_ownership_key_file_is_read_or_refused_with_the_setting_named(tmp_path: Path) -> None:
    assert naming.read_ownership_key(None) is None
    good = tmp_path / "key"
    good.write_bytes(b"x" * 40 + b"\n")
    assert naming.read_ownership_key(good) == OwnershipKey(b"x" * 40)
    assert "x" * 40 not in repr(naming.read_ownership_key(good))
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    with pytest.raises(ValueError, match=r"ownership.keyFile .*at least 32 bytes"):
        naming.read_ownership_key(short)
    with pytest.raises(ValueError, match=r"ownership.keyFile .*cannot be read"):
        naming.read_ownership_key(tmp_path / "missing")


def test_a_random_key_is_read_whole_even_when_it_ends_in_a_whitespace_byte(tmp_path: Path) -> None:
    # 32 random bytes may begin or end with b"\n" or b" ": stripping them made a valid key
    # 31 bytes long and stopped the controller about one start in eight.
    raw = b"\n" + bytes(range(128, 158)) + b" "
    key_file = tmp_path / "key"
    key_file.write_bytes(raw)
    assert naming.read_ownership_key(key_file) == OwnershipKey(raw)
    # A key written as text keeps working with the newline `echo` or an editor adds.
    text = tmp_path / "text-key"
    text.write_bytes(b"k" * 44 + b"\n")
    assert naming.read_ownership_key(text) == OwnershipKey(b"k" * 44)
