"""The words a Workload's check carries while its pool works: pure text from the pool.

Used by ``workload.decision``: `progress` for a Pending check, `unknown_error_retry` for the
Retry after too many launches answered with an AWS code the catalogue lacks.
"""

from __future__ import annotations

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool
from provisioner.controllers.workload.fit import unusable_text


def unknown_error_retry(pool: GangNodePool) -> str:
    """The Retry message once EC2 answered too many launches with a code nobody knows."""
    status, error = pool.status, pool.status.last_error
    said = f" Last answer: {error.message}" if error is not None else ""
    return (
        f"EC2 answered {status.consecutive_unknown_errors} launches in a row of pool "
        f"{pool.name} with an error this controller does not know; nothing is known to fix it "
        f"by waiting, so Kueue releases the quota and retries.{said}"
    )


def progress(pool: GangNodePool) -> str:
    """The pool's progress as a Pending check says it."""
    status, n = pool.status, pool.spec.count
    phase = status.phase
    if phase == Phase.IDLE:
        text = f"waiting to acquire {n}x {pool.spec.instance_type}."
    elif phase == Phase.ACQUIRING:
        text = f"acquiring {n}x {pool.spec.instance_type} all-or-nothing"
        if status.consecutive_shortfalls:
            text += (
                f" (capacity shortfalls so far: {status.consecutive_shortfalls}; $0 while short)"
            )
        text += "."
    elif phase == Phase.JOINING:
        text = f"{status.ready_nodes}/{n} nodes joined, Ready and usable.{unusable_text(status)}"
    elif phase == Phase.KEEP_WARM:
        text = f"reusing {len(status.instance_ids)} warm nodes."
    elif phase == Phase.RELEASING:
        text = "the previous node set is being released; acquiring next."
    else:
        text = f"phase {phase}."
    if status.last_error is not None:
        text += f" Last error: {status.last_error.reason}: {status.last_error.message}"
    return f"Pool {pool.name}: {text}"
