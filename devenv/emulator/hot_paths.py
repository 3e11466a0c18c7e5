"""Patches that change no answer of moto's, only what it costs to give one (P11, P12).

The emulator shares the benchmarks' two cores with the controller, Pulumi and the API
server, so a moto cost that grows with the whole region, where AWS's does not, makes a
large benchmark measure the emulator. Each patch here gives moto's own answer, as its test
checks against the original on the same data (`tests/unit/test_emulator_patches.py`).

P11 `S3Backend.list_objects` (and through it ListObjectsV2): moto walks every key of the
   bucket, each through its versioned store, to find those under a prefix. The Pulumi CLI
   lists under one stack's path each time it reads or saves that stack's checkpoint, while
   the bucket holds every stack's checkpoints, backups and history. The patch hands moto's
   listing only the keys under the prefix, found by name.
P12 `moto.core.responses.method_names_from_class`: moto finds a call's handler by listing
   the response class's methods with `inspect.getmembers`, on every call. The patch lists
   each class once; `install()` has added every handler before the first call.
"""

from __future__ import annotations

import functools
from typing import Any

import moto.core.responses
from moto.core.utils import method_names_from_class
from moto.s3.models import FakeTableStorageBucket, S3Backend

from devenv.emulator.patching import original, patch


class _KeysUnder:
    """The part of a bucket moto's listing reads (`keys`), narrowed to the names under a
    prefix, each at its newest version as the bucket's own store gives it."""

    def __init__(self, bucket: Any, prefix: str) -> None:
        store = bucket.keys
        # A copy of the names, as moto takes one: puts and deletes may run beside a listing.
        names = [name for name in list(dict.keys(store)) if name.startswith(prefix)]
        newest = ((name, store.get(name)) for name in names)
        self.keys = {name: key for name, key in newest if key is not None}


def list_objects(
    self: Any,
    bucket: Any,
    prefix: str | None,
    delimiter: str | None,
    marker: str | None,
    max_keys: int | None,
) -> Any:
    """P11: a listing under a prefix looks at the keys under it only."""
    listing = original(S3Backend, "list_objects")
    if not prefix or isinstance(bucket, FakeTableStorageBucket):
        return listing(self, bucket, prefix, delimiter, marker, max_keys)
    return listing(self, _KeysUnder(bucket, prefix), prefix, delimiter, marker, max_keys)


@functools.cache
def method_names(response_class: type) -> frozenset[str]:
    """P12: the handler names of a response class, listed once per class."""
    return frozenset(method_names_from_class(response_class))


def install_hot_paths() -> None:
    patch(S3Backend, "list_objects", list_objects)
    # A module function, not a method: moto's dispatch reads it from its own module.
    moto.core.responses.method_names_from_class = method_names  # type: ignore[assignment]
