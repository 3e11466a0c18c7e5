"""Whether a pod's tolerations tolerate a node's taint, by Kubernetes' rules (corev1
`Toleration.ToleratesTaint`): an empty effect matches every effect; `Exists` with an empty
key matches every taint, with a key every taint of that key; `Equal` (the default) matches
key and value.

Called by `doctor` (do the DaemonSets a gang node needs tolerate the gang taint?) and by the
dev environment's simulators, which place pods and device plugins as the scheduler and the
DaemonSet controller would. Raw Kubernetes dicts in, so both read API objects as listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["tolerates"]


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint`."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False
