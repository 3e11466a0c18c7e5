"""What /proc says of a process, for the benchmarks that measure the controller and the
Pulumi processes beside it (`bench_scale`, `bench_stack_ops`). Linux only, as the benches."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, field_name: str) -> int:
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM, ...); 0 when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: the state is [0], utime and
    stime [11] and [12], cutime and cstime [13] and [14], rss [21]."""
    # The command name may hold spaces and parentheses: split after its closing one.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def cpu_seconds(fields: list[str]) -> float:
    """User + system CPU of the process itself, from its `stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / TICKS


class MachineCpu(NamedTuple):
    """CPU seconds of the whole machine: `busy` is what its processes ran; `stolen` (steal)
    is the time the hypervisor gave other guests while this one wanted to run, in `total`
    and not in `busy`: a figure measured while much was stolen ran on less machine than the
    cores say."""

    busy: float
    total: float
    stolen: float

    def since(self, earlier: MachineCpu) -> MachineCpu:
        return MachineCpu(*(now - then for now, then in zip(self, earlier, strict=True)))

    @property
    def busy_percent(self) -> float:
        return 100 * self.busy / self.total if self.total else math.nan

    @property
    def stolen_percent(self) -> float:
        return 100 * self.stolen / self.total if self.total else math.nan


def machine_cpu() -> MachineCpu:
    """The machine's CPU since boot (`cpu_times`)."""
    return cpu_times(Path("/proc/stat").read_text())


def cpu_times(proc_stat: str) -> MachineCpu:
    """The machine's CPU from the text of /proc/stat, whose `cpu` line holds user, nice,
    system, idle, iowait, irq, softirq, steal, ... in clock ticks."""
    fields = [int(x) for x in proc_stat.split("\n", 1)[0].split()[1:]]
    idle, stolen = fields[3] + fields[4], fields[7]  # idle + iowait; steal
    total = sum(fields[:8])  # guest time is counted in user already
    return MachineCpu((total - idle - stolen) / TICKS, total / TICKS, stolen / TICKS)


def processes() -> dict[int, list[str]]:
    """Every live process, with its stat fields (one that ends while read is left out)."""
    found: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = stat_fields(int(entry))
            except (OSError, IndexError):
                continue
    return found


def descendants(root: int) -> dict[int, list[str]]:
    """Every live process below `root` (not `root` itself), with its stat fields."""
    every = processes()
    parents = {pid: int(fields[1]) for pid, fields in every.items()}
    found: dict[int, list[str]] = {}
    for pid, fields in every.items():
        at, seen = pid, 0
        while at in parents and seen < 64:
            at, seen = parents[at], seen + 1
            if at == root:
                found[pid] = fields
                break
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
