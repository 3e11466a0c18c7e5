"""GangNodePool bodies for tests: a spec, a claim, a whole object.

Each builder returns the JSON body as the apiserver holds it (camelCase keys, durations as
text), so a test can hand it to a fake store, the real apiserver or `GangNodePool.from_dict`
alike. Keyword overrides use the models' Python names (`instance_type=`, `keep_warm_ttl=`);
an override of None leaves the key out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.meta import kube_alias

NODE_ROLE: Final = "arn:aws:iam::123456789012:role/eks-gang-node-role"

_SPEC: Final[Mapping[str, Any]] = {
    "pool": "pool-a",
    "count": 4,
    "instance_type": "p4d.24xlarge",
    "mode": "runinstances",
    "region": "us-east-1",
    "node_role_arn": NODE_ROLE,
    "keep_warm_ttl": "10m",
    "max_lifetime": "4h",
    "ami_variant": "nvidia",
}


def _body(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {kube_alias(k): v for k, v in fields.items() if v is not None}


def pool_spec(**overrides: Any) -> dict[str, Any]:
    """A valid spec: pool-a, four p4d.24xlarge by RunInstances in us-east-1, unclaimed."""
    return _body({**_SPEC, **overrides})


def claim(
    *,
    namespace: str = "ml",
    name: str = "wl",
    uid: str = "wl-uid",
    claimed_at: str = "2026-11-30T11:59:00Z",
) -> dict[str, Any]:
    """The Workload a pool serves, as `spec.claim`."""
    return _body({"namespace": namespace, "name": name, "uid": uid, "claimed_at": claimed_at})


def pool(
    name: str = "pool-a",
    *,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """A GangNodePool object named `name` (its spec's pool too, unless `spec` is given);
    `metadata` overrides by Python name (`uid=`, `resource_version=`, `finalizers=`,
    `deletion_timestamp=`). No status unless one is given."""
    body: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.GNP_KIND,
        "metadata": _body({"name": name, **metadata}),
        "spec": dict(spec) if spec is not None else pool_spec(pool=name),
    }
    if status is not None:
        body["status"] = dict(status)
    return body


def pool_lookup(*bodies: Mapping[str, Any]) -> Callable[[str], GangNodePool | None]:
    """The Job webhook's pool reader over these pool bodies, by name (none given: no pool
    exists)."""
    by_name = {b["metadata"]["name"]: GangNodePool.from_dict(dict(b)) for b in bodies}
    return by_name.get


def assert_holds(written: Any, expected: Any) -> None:
    """Every key of `expected` (nested mappings compared key by key) has its value in
    `written`, a status as the apiserver would hold it; keys `expected` leaves out are free."""
    if isinstance(expected, dict) and written is not None:
        for key, value in expected.items():
            assert_holds(written.get(key), value)
    else:
        assert written == expected
