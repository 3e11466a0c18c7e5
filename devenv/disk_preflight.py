"""Before the test command builds anything: is there room for what it will build?

A cold run builds the Go tools (module and build caches beside them) and three images in
podman's vfs store (every layer a full copy): about 23 GiB on a machine with nothing
cached. A disk that fills half-way fails a late build with "no space left on device" after
an hour, far from its cause; this check fails in a second, naming the directory, what is
free there and what to do. A warm cache needs far less: the images are rebuilt, the tools
are not.

`python -m devenv.disk_preflight` exits 1 with that message; `ATOMIC_GANG_SKIP_DISK_CHECK=1`
skips it (a machine whose free space the check cannot see, such as a quota'd mount).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from provisioner.toolchain.installer import cache_root, tool_dir
from provisioner.toolchain.versions import (
    ALL_TOOLS,
    PULUMI_KUBERNETES,
    REGISTRY,
    TEST_TOOLS,
    GoTool,
)

GIB: Final = 1 << 30
# Measured on a whole cold run of the test command (7a1b962): the empty HOME, holding the
# tools' caches and the podman store, grew to 23 GiB, with some room kept on top; a warm
# run rebuilds the images only.
COLD_NEED: Final = 26 * GIB
WARM_NEED: Final = 6 * GIB
_DEFAULT_PODMAN_ROOT: Final = Path("/var/lib/containers")

DiskFree = Callable[[Path], int]


@dataclass(frozen=True)
class Shortfall:
    where: Path
    free: int
    need: int
    cold: bool

    def message(self) -> str:
        what = (
            "a cold run builds the Go tools and the images here"
            if self.cold
            else "a warm run rebuilds the images here"
        )
        return (
            f"[preflight] {self.free / GIB:.1f} GiB free on the disk holding {self.where}; "
            f"{what} and needs about {self.need / GIB:.0f} GiB. Free space there, or point "
            "ATOMIC_GANG_CACHE (the tools) and ATOMIC_GANG_PODMAN_FLAGS --root (the images) "
            "at a larger disk."
        )


def podman_root(flags: str | None) -> Path:
    """The podman store the image targets use: `--root` in ATOMIC_GANG_PODMAN_FLAGS, else
    podman's default for root."""
    words = shlex.split(flags or "")
    for i, word in enumerate(words):
        if word == "--root" and i + 1 < len(words):
            return Path(words[i + 1])
        if word.startswith("--root="):
            return Path(word.split("=", 1)[1])
    return _DEFAULT_PODMAN_ROOT


def _existing(path: Path) -> Path:
    """The nearest directory that exists: the store may not be made yet."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _free(path: Path) -> int:
    return shutil.disk_usage(_existing(path)).free


def _device(path: Path) -> int:
    return _existing(path).stat().st_dev


def shortfall(
    tools: Iterable[GoTool],
    cache: Path,
    store: Path,
    free: DiskFree | None = None,
    device: Callable[[Path], int] | None = None,
) -> Shortfall | None:
    """The first disk without room, None when both have it. The cache and the store on one
    disk need the sum of what each needs."""
    free, device = free or _free, device or _device
    cold = any(not (tool_dir(tool) / ".built").exists() for tool in tools)
    cache_need = (COLD_NEED if cold else WARM_NEED) // 2
    store_need = (COLD_NEED if cold else WARM_NEED) - cache_need
    needs: dict[int, tuple[Path, int]] = {}
    for where, need in ((cache, cache_need), (store, store_need)):
        dev = device(where)
        first, total = needs.get(dev, (where, 0))
        needs[dev] = (first, total + need)
    for where, need in needs.values():
        available = free(where)
        if available < need:
            return Shortfall(where, available, need, cold)
    return None


def main() -> int:
    if os.environ.get("ATOMIC_GANG_SKIP_DISK_CHECK") == "1":
        return 0
    tools = (*ALL_TOOLS, *TEST_TOOLS, PULUMI_KUBERNETES, REGISTRY)
    short = shortfall(tools, cache_root(), podman_root(os.environ.get("ATOMIC_GANG_PODMAN_FLAGS")))
    if short is None:
        return 0
    print(short.message(), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
