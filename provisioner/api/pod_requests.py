"""What one pod of a gang requests: Kubernetes quantities and the scheduler's pod request.

The Workload reconciler reads the pod templates of a Workload's pod sets, the webhook those
of the object a user applies (a Job, JobSet, PyTorchJob, TrainJob); both call
`gang_pod_requests`, which answers the largest request of any one pod of the gang, resource
by resource: what one node of the gang must hold for any of its pods to fit. The pool
checks its Nodes' allocatable against it (`controllers/pool/usable.py`), and the shape
check the instance type's figures (`api/pod_fit.py`).

A pod's request is the scheduler's ("Resource Management for Pods and Containers" and
`k8s.io/component-helpers/resource`, `PodRequests`): the sum over its containers, plus the
restartable (sidecar) init containers, or the largest init container with the sidecars
started before it, whichever is larger, plus the pod's `overhead`. A container that sets
a limit and no request of a resource requests its limit (the apiserver defaults a Pod's
requests from its limits, and extended resources such as GPUs are usually set as limits
only). Amounts are kept in the scheduler's units: cpu in millicores, everything else in
whole units (bytes for memory), rounded up as `Quantity.MilliValue` and `.Value` round.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

__all__ = [
    "CPU",
    "MEMORY",
    "QuantityError",
    "ResourceAmounts",
    "format_amount",
    "gang_pod_requests",
    "parse_quantity",
    "pod_request",
    "scheduler_units",
]

CPU: Final = "cpu"
MEMORY: Final = "memory"

# A resource name mapped to an amount in scheduler units (see the module docstring).
ResourceAmounts = dict[str, int]

_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]*)$")
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity (the apiserver would refuse it)."""


def parse_quantity(raw: object) -> Fraction:
    """A Kubernetes quantity ("500m", "8Gi", "1.5", "1e3", or a JSON number) as a number."""
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is not a quantity")
    if isinstance(raw, int | float):
        return Fraction(str(raw))
    text = str(raw).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a quantity")
    number, suffix = match.groups()
    try:
        value = Fraction(number)
    except ValueError as exc:
        raise QuantityError(f"{text!r} is not a quantity") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    if suffix[:1] in ("e", "E"):
        return value * Fraction(10) ** int(suffix[1:])
    raise QuantityError(f"{text!r} has an unknown suffix {suffix!r}")


def scheduler_units(resource: str, raw: object) -> int:
    """The amount the scheduler compares: millicores for cpu, whole units otherwise."""
    value = parse_quantity(raw)
    return math.ceil(value * 1000) if resource == CPU else math.ceil(value)


def format_amount(resource: str, amount: int) -> str:
    """An amount in scheduler units as a person reads it: "3500m" or "4" cpu, "8Gi" memory."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY or resource.startswith(("hugepages-", "ephemeral-storage")):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
        return str(amount)
    return str(amount)


def _container_requests(container: Mapping[str, Any]) -> ResourceAmounts:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    out: ResourceAmounts = {}
    for name, raw in {**limits, **requests}.items():
        out[str(name)] = scheduler_units(str(name), raw)
    return out


def _add(into: ResourceAmounts, more: Mapping[str, int]) -> ResourceAmounts:
    out = dict(into)
    for name, amount in more.items():
        out[name] = out.get(name, 0) + amount
    return out


def _max(into: ResourceAmounts, more: Mapping[str, int]) -> ResourceAmounts:
    out = dict(into)
    for name, amount in more.items():
        out[name] = max(out.get(name, 0), amount)
    return out


def pod_request(pod_spec: Mapping[str, Any]) -> ResourceAmounts:
    """The scheduler's request of one pod of this spec (see the module docstring)."""
    total: ResourceAmounts = {}
    for container in pod_spec.get("containers") or ():
        total = _add(total, _container_requests(container))
    sidecars: ResourceAmounts = {}
    init_peak: ResourceAmounts = {}
    for container in pod_spec.get("initContainers") or ():
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            # A sidecar runs beside everything started after it, regular containers too.
            sidecars = _add(sidecars, own)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(own, sidecars))
    request = _max(_add(total, sidecars), init_peak)
    overhead = {
        str(k): scheduler_units(str(k), v) for k, v in (pod_spec.get("overhead") or {}).items()
    }
    return {k: v for k, v in _add(request, overhead).items() if v > 0}


def gang_pod_requests(pod_specs: Iterable[Mapping[str, Any]]) -> ResourceAmounts:
    """Resource by resource, the most any one pod of these specs requests: what one node
    of the gang must hold so that whichever pod lands on it fits."""
    out: ResourceAmounts = {}
    for spec in pod_specs:
        out = _max(out, pod_request(spec))
    return dict(sorted(out.items()))
