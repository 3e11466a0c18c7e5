"""Patches that change no answer of moto's, only what it costs to give one (P11-P13).

The emulator shares the benchmarks' two cores with the controller, Pulumi and the API
server, so a moto cost that grows with the whole region, where AWS's does not, makes a
large benchmark measure the emulator. Each patch here gives moto's own answer, as its test
checks against the original on the same data (`tests/unit/test_emulator_hot_paths.py`).

P11 `S3Backend.list_objects` (and through it ListObjectsV2): moto walks every key of the
   bucket, each through its versioned store, to find those under a prefix. The Pulumi CLI
   lists under one stack's path each time it reads or saves that stack's checkpoint, while
   the bucket holds every stack's checkpoints, backups and history. The patch hands moto's
   listing only the keys under the prefix, found by name.
P12 `moto.core.responses.method_names_from_class`: moto finds a call's handler by listing
   the response class's methods with `inspect.getmembers`, on every call. The patch lists
   each class once; `install()` has added every handler before the first call.
P13 `AttributePicker.__call__`: to serialize each field of each object of an answer, moto
   works out again which attribute names may hold it (six alias rules, each a new object)
   and tests the field's path against every response transformer of the call. A listing
   of hundreds of instances asks that for the same few hundred fields once per instance:
   70 % of the answer's cost. Both depend only on the object's class (moto declares its
   explicit aliases, `Meta`, on classes), the field and its shape, or on the field's path,
   so the patch works each out once per answer (the picker lives for one answer) and
   then reads the values as moto does.
"""

from __future__ import annotations

import functools
from typing import Any

import moto.core.responses
from moto.core.serialize import AttributePicker, AttributePickerContext
from moto.core.utils import MISSING, get_value, method_names_from_class
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


def pick_attribute(self: Any, context: AttributePickerContext) -> Any:
    """P13: moto's `AttributePicker.__call__`, its per-field answers worked out once."""
    memo = self.__dict__.setdefault("_emulator_memo", ({}, {}))
    keys_of, transform_of = memo
    obj = context.obj
    field = (type(obj), context.key, context.shape)
    keys = keys_of.get(field)
    if keys is None:
        keys = keys_of[field] = tuple(self.get_possible_keys(context))
    for possible_key in keys:
        value = get_value(obj, possible_key, MISSING)
        if value is not MISSING:
            break
    else:
        value = None
    key_path = f"{context.key_path}.{context.key}"
    transform = transform_of.get(key_path, MISSING)
    if transform is MISSING:
        transform = transform_of[key_path] = next(
            (t for path, t in self.response_transformers.items() if key_path.endswith(path)),
            None,
        )
    return value if transform is None else transform(value)


def install_hot_paths() -> None:
    patch(S3Backend, "list_objects", list_objects)
    patch(AttributePicker, "__call__", pick_attribute)
    # A module function, not a method: moto's dispatch reads it from its own module.
    moto.core.responses.method_names_from_class = method_names  # type: ignore[assignment]
