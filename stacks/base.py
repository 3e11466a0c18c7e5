"""The base of every pool resource and provider: type tokens, serialization, diff helpers.

Used by each resource module in ``stacks``.

Why the serialization guard: constructing a dynamic resource pickles its provider with
`pulumi.dynamic.serialize_provider`, which patches methods of the pure-Python pickler for
the duration and does not put them all back. Each construction wraps the previous patch
once more, so a long-running controller would, after a thousand or so resources, hit
RecursionError in any pure-Python pickling in the process; and two pools prepared at once
from two threads would patch each other's pickler mid-use. `PoolResource` serializes
constructions under one lock and restores the pickler afterwards.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Final

import pulumi
from pulumi.dynamic import DiffResult, Resource, ResourceProvider

__all__ = [
    "TYPE_MODULE",
    "Adopter",
    "PoolProvider",
    "PoolResource",
    "changed_keys",
    "diff_by_keys",
    "provider_serialization",
    "type_token",
]

# Resources show up as `pulumi-python:dynamic/atomicgang:<Name>` in state and `pulumi stack`.
TYPE_MODULE: Final = "atomicgang"
_SERIALIZE_LOCK: Final = threading.Lock()
_PATCHED: Final = ("_batch_setitems", "save_dict")


def type_token(name: str) -> str:
    return f"pulumi-python:dynamic/{TYPE_MODULE}:{name}"


@contextmanager
def provider_serialization() -> Iterator[None]:
    """Run one provider serialization alone and leave the pickler as it was found."""
    py_pickler: Any = pickle._Pickler
    with _SERIALIZE_LOCK:
        saved_class = pickle.Pickler
        saved = {name: py_pickler.__dict__.get(name) for name in _PATCHED}
        try:
            yield
        finally:
            setattr(pickle, "Pickler", saved_class)  # noqa: B010  (mypy refuses a plain assignment to a class)
            for name, value in saved.items():
                if value is None:
                    if name in py_pickler.__dict__:
                        delattr(py_pickler, name)
                else:
                    setattr(py_pickler, name, value)


class PoolProvider(ResourceProvider):
    """A provider of pool resources. Subclasses hold no state: they are pickled by
    reference (module + class name) and rebuild their clients on every call."""

    # Nothing secret is captured, so the provider need not be encrypted in the state; that
    # keeps the state readable to the driver's cheap reads and to operators.
    serialize_as_secret_always = False


# What a create interrupted by a crash made, found from the resource's inputs alone: (id,
# outputs), or None when it made nothing (``stacks.adoption``).
Adopter = Callable[[Mapping[str, Any]], "tuple[str, dict[str, Any]] | None"]


class PoolResource(Resource):
    """A dynamic resource of a pool's stack, whose construction is safe to run from several
    threads. Each subclass declares, once: its provider, the outputs its provider adds to
    the inputs (`output_names`, passed as None so Pulumi exposes them before they are
    known), and how a create interrupted by a crash is found again (`adopter`). Its type
    token is ``type_token(<class name>)``."""

    provider_type: ClassVar[type[PoolProvider]]
    output_names: ClassVar[tuple[str, ...]] = ()
    # A plain function of the inputs, read from the class (`stacks.adoption.ADOPTERS`).
    adopter: ClassVar[Adopter]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(module=TYPE_MODULE, name=cls.__name__, **kwargs)

    def __init__(
        self,
        resource_name: str,
        props: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = {**props, **dict.fromkeys(self.output_names)}
        with provider_serialization():
            super().__init__(self.provider_type(), resource_name, inputs, opts)


def changed_keys(
    olds: Mapping[str, Any], news: Mapping[str, Any], keys: Sequence[str]
) -> list[str]:
    return [k for k in keys if olds.get(k) != news.get(k)]


def diff_by_keys(
    olds: Mapping[str, Any],
    news: Mapping[str, Any],
    *,
    replace_keys: Sequence[str],
    update_keys: Sequence[str] = (),
    delete_before_replace: bool = True,
) -> DiffResult:
    """A change to a replace key replaces the resource; to an update key, updates it."""
    replaces = changed_keys(olds, news, replace_keys)
    updates = changed_keys(olds, news, update_keys)
    return DiffResult(
        changes=bool(replaces or updates),
        replaces=replaces,
        delete_before_replace=delete_before_replace,
    )
