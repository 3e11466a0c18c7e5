"""The typed cache: models of an informer's objects, each parsed once per resourceVersion,
and dropped with the object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.nodes import Node
from provisioner.kube.cache import TypedCache
from provisioner.kube.resources import ObjectKey, key_of
from tests.support.nodes import node as node_body

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


def node(name: str, rv: str, pool: str = "p1") -> Obj:
    """Node `name` (of EC2 instance `name`) at resourceVersion `rv`."""
    body = node_body(name, pool=pool)
    body["metadata"]["name"] = name
    body["metadata"]["resourceVersion"] = rv
    return body


class RawInformer:
    """An informer's cache and handlers, changed by the test instead of a watch."""

    def __init__(self) -> None:
        self.objects: dict[ObjectKey, Obj] = {}
        self.on_delete: list[Callable[[Obj], None]] = []
        self.listed: list[Obj] | None = None  # what `list` answers, when not the cache

    def reset(self) -> None:
        self.objects.clear()
        self.on_delete.clear()
        self.listed = None

    def put(self, obj: Obj) -> None:
        self.objects[key_of(obj)] = obj

    def delete(self, obj: Obj) -> None:
        del self.objects[key_of(obj)]
        for handler in self.on_delete:
            handler(obj)

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get(ObjectKey(namespace, name))

    def list(self) -> list[Obj]:
        return list(self.objects.values()) if self.listed is None else self.listed

    def list_indexed(self, value: str) -> list[Obj]:
        return [o for o in self.list() if o["metadata"]["labels"].get(c.POOL_LABEL) == value]

    def list_keys(self) -> list[ObjectKey]:
        return list(self.objects)

    def add_handlers(
        self,
        on_add: Callable[[Obj], None] | None = None,
        on_update: Callable[[Obj, Obj], None] | None = None,
        on_delete: Callable[[Obj], None] | None = None,
    ) -> None:
        if on_delete is not None:
            self.on_delete.append(on_delete)


class CountingParse:
    def __init__(self) -> None:
        self.parsed: list[tuple[str, str]] = []

    def __call__(self, body: Obj) -> Node:
        self.parsed.append((body["metadata"]["name"], body["metadata"].get("resourceVersion")))
        return Node.from_dict(body)


def cache() -> tuple[RawInformer, CountingParse, TypedCache[Node]]:
    raw, parse = RawInformer(), CountingParse()
    return raw, parse, TypedCache(raw, parse)


def test_each_version_is_parsed_once_whoever_reads_it() -> None:
    raw, parse, nodes = cache()
    raw.put(node("a", "1"))
    raw.put(node("b", "2", pool="p2"))
    first = nodes.get("", "a")
    assert first is not None and first.instance_id == "a"
    assert nodes.get("", "a") is first
    assert [n.name for n in nodes.list()] == ["a", "b"]
    assert [n.name for n in nodes.list_indexed("p2")] == ["b"]
    mapped = nodes.to_keys(lambda n: [ObjectKey("", n.labels[c.POOL_LABEL])])
    assert list(mapped(node("a", "1"))) == [ObjectKey("", "p1")]
    assert parse.parsed == [("a", "1"), ("b", "2")]
    raw.put(node("a", "3", pool="p3"))
    again = nodes.get("", "a")
    assert again is not None and again.labels[c.POOL_LABEL] == "p3"
    assert parse.parsed[-1] == ("a", "3") and len(parse.parsed) == 3
    assert nodes.get("", "missing") is None
    assert nodes.list_keys() == [ObjectKey("", "a"), ObjectKey("", "b")]


def test_a_deleted_object_takes_its_model_with_it() -> None:
    raw, _, nodes = cache()
    raw.put(node("a", "1"))
    nodes.list()
    assert len(nodes) == 1
    raw.delete(node("a", "1"))
    assert len(nodes) == 0


def test_a_model_of_an_object_deleted_while_it_was_parsed_is_not_kept() -> None:
    raw, _, nodes = cache()
    raw.listed = [node("a", "1")]  # listed, then deleted before its model was kept
    assert [n.name for n in nodes.list()] == ["a"]
    assert len(nodes) == 0


def test_a_body_without_a_resource_version_is_parsed_each_time() -> None:
    raw, parse, nodes = cache()
    raw.put({"metadata": {"name": "a"}})
    nodes.get("", "a")
    nodes.get("", "a")
    assert len(parse.parsed) == 2 and len(nodes) == 0


def test_a_body_that_does_not_parse_raises_to_the_reader() -> None:
    raw, _, nodes = cache()
    raw.put({"metadata": {"resourceVersion": "1", "name": "a", "labels": "not a map"}})
    with pytest.raises(ValueError):
        nodes.get("", "a")


def test_with_models_kept_only_the_most_recently_read_models_stay() -> None:
    raw, parse = RawInformer(), CountingParse()
    nodes = TypedCache(raw, parse, models_kept=2)
    for name in ("a", "b", "c"):
        raw.put(node(name, "1"))
        nodes.get("", name)
    assert len(nodes) == 2  # a's model went: the least recently read
    nodes.get("", "b")  # kept: not parsed again, and now the most recently read
    nodes.get("", "a")  # parsed again, and c goes in its place
    assert parse.parsed == [("a", "1"), ("b", "1"), ("c", "1"), ("a", "1")]
    nodes.get("", "b")
    nodes.get("", "c")
    assert parse.parsed[-1] == ("c", "1") and len(parse.parsed) == 5
    assert len(nodes) == 2
    # Every object is still there to read: only its model is parsed again.
    assert [n.name for n in nodes.list()] == ["a", "b", "c"]
