"""What the host the controller runs on offers it: CPUs and a memory limit, read once.

Read by the composition root (`assembly.build_system`) at start-up and passed to what is
sized by it (the stack-operation executor, `StackOperations.workers_on`); nothing else
reads the machine, so Settings stay data and a test builds them without touching it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["CGROUP_MEMORY_LIMITS", "HostResources", "cpu_count", "memory_limit", "read_host"]

# Where a container's memory limit is read: cgroup v2, then v1. A v1 group without a limit
# reads as a huge number, which the executor's sizing turns into no bound.
CGROUP_MEMORY_LIMITS: Final = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@dataclass(frozen=True)
class HostResources:
    """The CPUs this process may run on, and its memory limit in bytes (None: none)."""

    cpus: int
    memory_limit: int | None


def cpu_count() -> int:
    """CPUs this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def memory_limit(paths: Sequence[Path] = CGROUP_MEMORY_LIMITS) -> int | None:
    """This container's memory limit in bytes, or None when there is none to read."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        return int(text) if text.isdigit() else None  # v2 writes "max" for no limit
    return None


def read_host() -> HostResources:
    """This host's CPUs and memory limit, as the process sees them now."""
    return HostResources(cpus=cpu_count(), memory_limit=memory_limit())
