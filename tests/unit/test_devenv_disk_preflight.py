"""The test command's disk check: a cold cache needs room for the tools and the images,
a warm one for the images; one disk holding both needs the sum; the message names the
directory and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv import disk_preflight as dp
from provisioner.toolchain.versions import HELM, PULUMI

GIB = dp.GIB


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(root))
    return root


def _warm(*tools: object) -> None:
    from provisioner.toolchain.installer import tool_dir

    for tool in tools:
        home = tool_dir(tool)  # type: ignore[arg-type]
        home.mkdir(parents=True)
        (home / ".built").write_text("v\n")


def test_a_cold_cache_on_a_small_disk_is_refused_naming_the_directory_and_the_fix(
    cache: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    short = dp.shortfall(
        (PULUMI, HELM), cache, store, free=lambda _p: 12 * GIB, device=lambda _p: 1
    )
    assert short is not None and short.cold and short.need == dp.COLD_NEED
    text = short.message()
    assert str(cache) in text and "12.0 GiB free" in text and "ATOMIC_GANG_CACHE" in text


def test_a_warm_cache_needs_room_for_the_images_only(cache: Path, tmp_path: Path) -> None:
    _warm(PULUMI, HELM)
    store = tmp_path / "store"
    assert (
        dp.shortfall((PULUMI, HELM), cache, store, free=lambda _p: 12 * GIB, device=lambda _p: 1)
        is None
    )
    short = dp.shortfall((PULUMI, HELM), cache, store, free=lambda _p: 2 * GIB, device=lambda _p: 1)
    assert short is not None and not short.cold and short.need == dp.WARM_NEED


def test_the_cache_and_the_store_on_two_disks_each_need_their_half(
    cache: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    room = dp.COLD_NEED // 2 + GIB  # each disk's half, and a little more
    free = {cache: room, store: 5 * GIB}
    short = dp.shortfall(
        (PULUMI,), cache, store, free=lambda p: free[p], device=lambda p: 1 if p == cache else 2
    )
    assert short is not None and short.where == store and short.need == dp.COLD_NEED // 2
    free[store] = room
    assert (
        dp.shortfall(
            (PULUMI,), cache, store, free=lambda p: free[p], device=lambda p: 1 if p == cache else 2
        )
        is None
    )


@pytest.mark.parametrize(
    ("flags", "root"),
    [
        (None, Path("/var/lib/containers")),
        ("--root /w/c --runroot /w/r --storage-driver vfs", Path("/w/c")),
        ("--storage-driver vfs --root=/x", Path("/x")),
    ],
)
def test_the_store_is_the_podman_flags_root(flags: str | None, root: Path) -> None:
    assert dp.podman_root(flags) == root


def test_the_check_runs_on_this_machine_and_can_be_skipped(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dp, "_free", lambda _p: 0)
    assert dp.main() == 1
    monkeypatch.setenv("ATOMIC_GANG_SKIP_DISK_CHECK", "1")
    assert dp.main() == 0
