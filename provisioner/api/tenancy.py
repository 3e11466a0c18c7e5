"""Which namespace a pool belongs to, and whether a Job of another namespace may use it.

A pool belongs to the namespace of the Job that created it (`spec.ownerNamespace`, written
once by the Workload reconciler). A Job of another namespace naming it is refused — by the
Job webhook at `kubectl apply`, and by the admission check for a Job that got past it —
unless the installer's `tenancy.sharedPools` shares the pool with that namespace. Both
call `foreign_pool_problem`, so they refuse with the same sentence.

Pools made before pools belonged to a namespace have no owner: the first claim after the
upgrade binds them (see `workload_decision`). Pure: no I/O.
"""

from __future__ import annotations

from provisioner.api import constants as c
from provisioner.api.problems import Problem
from provisioner.api.settings import Tenancy

__all__ = ["ClusterReadError", "PoolLookupError", "foreign_pool_problem", "shares_every_pool"]


class ClusterReadError(RuntimeError):
    """Something a verdict rests on could not be read from the apiserver (it failed or
    refused the read): the object can be neither refused nor let through on it, and the
    webhook's failurePolicy decides."""


class PoolLookupError(ClusterReadError):
    """The pool a Job names could not be read (the apiserver failed or refused the read):
    its owner is unknown, so the Job can be neither refused nor let through on it."""


def foreign_pool_problem(
    pool: str, owner_namespace: str | None, namespace: str, tenancy: Tenancy
) -> Problem | None:
    """The refusal for a Job in `namespace` naming `pool`, owned by `owner_namespace`
    (None: owned by no namespace yet); None when the Job may use the pool."""
    if owner_namespace is None or owner_namespace == namespace:
        return None
    if tenancy.may_share(pool, namespace):
        return None
    return Problem(
        key=c.POOL_LABEL,
        value=pool,
        reason=c.REASON_POOL_OF_ANOTHER_NAMESPACE,
        detail=f"pool {pool} belongs to namespace {owner_namespace}, where the Job that "
        f"created it ran; a Job in namespace {namespace} may not claim it or its warm nodes",
        accepted=f"a pool name of your own, or ask the installer to share pool {pool} with "
        f"namespace {namespace} in the controller's tenancy.sharedPools setting",
        is_label=True,
    )


def shares_every_pool(tenancy: Tenancy, namespace: str) -> bool:
    """True when `namespace` may use every pool, whoever owns it (a `"*"` entry in
    tenancy.sharedPools naming it): the one case where a pod that could run on any
    pool's nodes may do so."""
    return any(
        entry.pool == "*" and ("*" in entry.namespaces or namespace in entry.namespaces)
        for entry in tenancy.shared_pools
    )
