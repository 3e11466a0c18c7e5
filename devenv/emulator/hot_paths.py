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
P15 `moto.ec2.utils.tag_filter_matches`: a filtered DescribeInstances tests every instance
   of the region against each `tag:` filter, and moto translates and compiles the filter's
   values into patterns again for each instance, then rebuilds the instance's whole tag
   list to read one key. The controller lists one pool's instances with four such filters,
   so at 2,000 instances a listing cost 68 ms, three quarters of it there (24 ms patched).
   The patch keeps the patterns of the last thousand value lists, compares literal values
   (no `*`, `?`, `[` or backslash, whose pattern matches that string only) as strings, and
   reads a tag from the resource's own entry of the tag table, as P7's `get_tags` does.
P16 (`instance_reads`, installed from here): moto's reads of instances by id, and listings
   by ids, without copying every reservation of the region first.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import moto.core.responses
import moto.ec2.utils
from moto.core.serialize import AttributePicker, AttributePickerContext
from moto.core.utils import MISSING, get_value, method_names_from_class
from moto.ec2.models import EC2Backend
from moto.s3.models import FakeTableStorageBucket, S3Backend

import devenv.emulator.instances
from devenv.emulator.instance_reads import (
    BACKEND_READS,
    install_instance_reads,
    reservations_by_instance_ids,
)
from devenv.emulator.instances import get_tags, own_tags
from devenv.emulator.patching import original, patch

# moto's own, kept before `install_hot_paths` replaces the module's name for it.
MOTO_TAG_FILTER_MATCHES: Final = moto.ec2.utils.tag_filter_matches
# fnmatch's specials, and moto's escape for a literal `*` or `?`.
_PATTERN_CHARACTERS: Final = frozenset("*?[\\")


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


@functools.lru_cache(maxsize=1024)
def value_patterns(values: tuple[str, ...]) -> tuple[re.Pattern[str], ...] | None:
    """P15: the patterns moto makes of a filter's values, once; None when every value is a
    literal, whose pattern (fnmatch's, anchored at both ends) matches that string only."""
    if not any(_PATTERN_CHARACTERS.intersection(value) for value in values):
        return None
    return tuple(re.compile(moto.ec2.utils.simple_aws_filter_to_re(v)) for v in values)


def _tag_values(obj: Any, key: str | None) -> Iterable[str]:
    """moto's `get_obj_tag_values`; for a resource whose tags are P7's, read off its entry."""
    if type(obj).get_tags is not get_tags:
        return moto.ec2.utils.get_obj_tag_values(obj, key=key)
    tags = own_tags(obj)
    if key is None:
        return set(tags.values())
    return (tags[key],) if key in tags else ()


def tag_filter_matches(obj: Any, filter_name: str, filter_values: Sequence[str]) -> bool:
    """P15: moto's `tag_filter_matches`, its patterns made once and its tags read once."""
    if filter_name == "tag-key":
        tag_values: Iterable[str] = moto.ec2.utils.get_obj_tag_names(obj)
    elif filter_name == "tag-value":
        tag_values = _tag_values(obj, None)
    elif filter_name.startswith("tag:"):
        tag_values = _tag_values(obj, filter_name[4:])
    else:
        tag_values = [moto.ec2.utils.get_obj_tag(obj, filter_name) or ""]
    patterns = value_patterns(tuple(filter_values))
    for tag_value in tag_values:
        if tag_value in filter_values:
            return True
        if patterns is not None and any(p.match(tag_value) for p in patterns):
            return True
    return False


def install_hot_paths() -> None:
    patch(S3Backend, "list_objects", list_objects)
    patch(AttributePicker, "__call__", pick_attribute)
    # A module function, not a method: moto's dispatch reads it from its own module.
    moto.core.responses.method_names_from_class = method_names  # type: ignore[assignment]
    moto.ec2.utils.tag_filter_matches = tag_filter_matches
    install_instance_reads()


def _motos_by_ids(backend: Any, instance_ids: list[str], filters: Any = None) -> list[Any]:
    found: list[Any] = original(EC2Backend, "get_reservations_by_instance_ids")(
        backend, instance_ids, filters
    )
    return found


@contextlib.contextmanager
def motos_own_reads() -> Iterator[None]:
    """moto's own code for every instance read P15 and P16 replace, for the length of the
    block: what the patches' tests and `bench_emulator_reads` compare them with. The
    emulator's own behaviour around those reads (P4b's lags) stays."""
    moto.ec2.utils.tag_filter_matches = MOTO_TAG_FILTER_MATCHES
    for name in BACKEND_READS:
        setattr(EC2Backend, name, original(EC2Backend, name))
    devenv.emulator.instances.reservations_by_instance_ids = _motos_by_ids
    try:
        yield
    finally:
        moto.ec2.utils.tag_filter_matches = tag_filter_matches
        for name, read in BACKEND_READS.items():
            setattr(EC2Backend, name, read)
        devenv.emulator.instances.reservations_by_instance_ids = reservations_by_instance_ids
