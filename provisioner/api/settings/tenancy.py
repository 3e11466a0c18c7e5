"""`tenancy`: which namespaces may use a pool besides the one that created it; the rule
that reads it is `provisioner.api.tenancy`."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from pydantic import Field, field_validator

from provisioner.api.settings.section import Section

__all__ = ["SharedPool", "Tenancy"]

_POOL_GLOB = re.compile(r"^\*$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$|^[a-z0-9][-a-z0-9]*\*$")
_NAMESPACE_OR_ANY = re.compile(r"^\*$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SharedPool(Section):
    """Pools matching `pool` may also be claimed from `namespaces`, whichever of them (or
    any other) created the pool. Sharing a pool shares its warm nodes, and whatever the
    last Job left on their disks."""

    pool: str = Field(
        max_length=63,
        description='A pool name, or a trailing-* glob such as "shared-*"; "*" for every pool.',
    )
    namespaces: tuple[str, ...] = Field(
        min_length=1,
        description='Namespaces whose Jobs may claim those pools; "*" for every namespace.',
    )

    @field_validator("pool")
    @classmethod
    def _pool_glob(cls, v: str) -> str:
        if not _POOL_GLOB.match(v):
            raise ValueError(
                f"tenancy.sharedPools[].pool {v!r} is not a pool name or a trailing-* glob "
                'such as "shared-*" (lowercase letters, digits and "-"), or "*"'
            )
        return v

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in v if len(n) > 63 or not _NAMESPACE_OR_ANY.match(n)]
        if bad:
            raise ValueError(
                f"tenancy.sharedPools[].namespaces {bad} are not namespace names (lowercase "
                'RFC 1123 labels) or "*"'
            )
        return v

    def matches(self, pool: str) -> bool:
        return fnmatchcase(pool, self.pool) if self.pool.endswith("*") else pool == self.pool


class Tenancy(Section):
    """A pool belongs to the namespace of the Job that created it; Jobs of other namespaces
    may not claim it, nor its warm nodes, unless an entry here shares it with them."""

    shared_pools: tuple[SharedPool, ...] = Field(
        default=(),
        description="Pools that namespaces besides the owner's may claim; empty shares none.",
    )

    def may_share(self, pool: str, namespace: str) -> bool:
        """True when a Job in `namespace` may claim `pool` though another namespace owns it."""
        return any(
            entry.matches(pool) and ("*" in entry.namespaces or namespace in entry.namespaces)
            for entry in self.shared_pools
        )
