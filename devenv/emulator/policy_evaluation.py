"""IAM identity-policy evaluation: Action, Resource and Condition, as IAM documents them.

Used by `authorization` (the emulator's answer to a caller whose identity policies do not
allow a call) and by the unit tests that evaluate the controller's generated policy. Pure:
no moto, no AWS SDK.

What it follows (IAM User Guide):
- "Policy evaluation logic" (identity-based policies within one account): an explicit Deny
  in any statement wins; else an Allow that matches action, resource and conditions allows;
  else the request is implicitly denied.
- "IAM JSON policy elements: Action / NotAction, Resource / NotResource": `*` matches any run
  of characters and `?` one character; action names match case-insensitively, resource
  ARNs case-sensitively.
- "IAM JSON policy elements: Condition operators": the operators of a block are ANDed, the
  keys of an operator ANDed, the values of a key ORed (a negated operator matches when the
  context value equals none of them). A key absent from the request context makes the
  condition false, except for negated operators (true), `...IfExists` (true) and `Null`.
  Condition keys are case-insensitive, values case-sensitive (the `IgnoreCase` operators
  aside).
- "Set operators for multivalued context keys": `ForAllValues:` is true when every context
  value matches some policy value, also when the key is absent or empty; `ForAnyValue:`
  when at least one does, false when the key is absent.

- "Actions, resources, and condition keys for AWS services" (the Service Authorization
  Reference, read through `service_reference`): a request carries only the condition keys
  its action supports for the resource's type (and the global `aws:` keys), so a condition
  on a key the action does not support finds it absent, and an Allow naming it with a
  positive operator does not match, as on AWS. A context whose resource is of a type its
  action does not take is refused (no AWS request makes one).

Not modelled: policy variables (`${aws:username}`), `NotPrincipal`, resource-based
policies, permission boundaries, SCPs and session policies, Date and IpAddress operators.
A document that uses an operator not listed here is refused loudly (`UnsupportedPolicy`),
never read as allowing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from devenv.emulator.service_reference import request_keys

__all__ = [
    "Decision",
    "RequestContext",
    "UnsupportedPolicy",
    "evaluate",
    "statements_of",
]


class Decision(Enum):
    ALLOW = "allow"
    EXPLICIT_DENY = "explicitDeny"
    IMPLICIT_DENY = "implicitDeny"


class UnsupportedPolicy(ValueError):
    """The document uses an element this evaluator does not model."""


ContextValue = str | Sequence[str]


@dataclass(frozen=True)
class RequestContext:
    """One authorization: an action on one resource ARN, with the request's condition keys
    (single values as strings, multivalued keys such as `aws:TagKeys` as sequences)."""

    action: str
    resource: str
    keys: Mapping[str, ContextValue] = field(default_factory=dict)

    def values(self, key: str) -> list[str] | None:
        """The context's values for `key` (case-insensitive), None when it is absent."""
        wanted = key.lower()
        for name, value in self.keys.items():
            if name.lower() == wanted:
                return [value] if isinstance(value, str) else [str(v) for v in value]
        return None


def _glob(pattern: str, text: str, *, case_sensitive: bool) -> bool:
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.fullmatch(regex, text, flags | re.DOTALL) is not None


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str | bool | int | float):
        return [str(value).lower() if isinstance(value, bool) else str(value)]
    return [str(v).lower() if isinstance(v, bool) else str(v) for v in value]


def _string_match(op: str, policy: str, actual: str) -> bool:
    if op in ("StringEquals", "StringNotEquals"):
        return policy == actual
    if op in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return policy.lower() == actual.lower()
    if op in ("StringLike", "StringNotLike"):
        return _glob(policy, actual, case_sensitive=True)
    if op in ("ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"):
        # ARNs compare segment by segment, each with wildcards ("ARN condition operators").
        wanted, got = policy.split(":", 5), actual.split(":", 5)
        return len(wanted) == len(got) == 6 and all(
            _glob(w, g, case_sensitive=True) for w, g in zip(wanted, got, strict=True)
        )
    if op in ("Bool",):
        return policy.lower() == actual.lower()
    if op.startswith("Numeric"):
        try:
            a, p = float(actual), float(policy)
        except ValueError:
            return False
        return {
            "NumericEquals": a == p,
            "NumericNotEquals": a == p,
            "NumericLessThan": a < p,
            "NumericLessThanEquals": a <= p,
            "NumericGreaterThan": a > p,
            "NumericGreaterThanEquals": a >= p,
        }[op]
    raise UnsupportedPolicy(f"condition operator {op!r} is not modelled")


_NEGATED: Final = frozenset(
    {
        "StringNotEquals",
        "StringNotEqualsIgnoreCase",
        "StringNotLike",
        "ArnNotEquals",
        "ArnNotLike",
        "NumericNotEquals",
    }
)
_KNOWN: Final = frozenset(
    {
        "StringEquals",
        "StringEqualsIgnoreCase",
        "StringLike",
        "ArnEquals",
        "ArnLike",
        "Bool",
        "NumericEquals",
        "NumericLessThan",
        "NumericLessThanEquals",
        "NumericGreaterThan",
        "NumericGreaterThanEquals",
        "Null",
    }
    | _NEGATED
)


def _condition_holds(operator: str, key: str, wanted: list[str], ctx: RequestContext) -> bool:
    qualifier, _, op = operator.rpartition(":")
    if_exists = op.endswith("IfExists")
    op = op.removesuffix("IfExists")
    if op not in _KNOWN or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise UnsupportedPolicy(f"condition operator {operator!r} is not modelled")
    actual = ctx.values(key)
    if op == "Null":
        absent = actual is None or actual == []
        return all((w.lower() == "true") == absent for w in wanted)
    negated = op in _NEGATED
    if actual is None or (qualifier and not actual):
        if qualifier == "ForAllValues":
            return True
        if qualifier == "ForAnyValue":
            return False
        return if_exists or negated

    def one(value: str) -> bool:
        hit = any(_string_match(op, w, value) for w in wanted)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in actual)
    if qualifier == "ForAnyValue":
        return any(one(v) for v in actual)
    if len(actual) > 1:
        # A single-valued operator on a multivalued key: AWS compares as for ForAnyValue
        # and the User Guide warns against it; refuse rather than guess.
        raise UnsupportedPolicy(f"{operator} on multivalued key {key!r}: use a set operator")
    return one(actual[0])


def _conditions_hold(conditions: Mapping[str, Any], ctx: RequestContext) -> bool:
    for operator, pairs in conditions.items():
        if not isinstance(pairs, Mapping):
            raise UnsupportedPolicy(f"condition {operator!r} must map keys to values")
        for key, wanted in pairs.items():
            if not _condition_holds(operator, str(key), _listed(wanted), ctx):
                return False
    return True


def _matches_any(patterns: Iterable[str], text: str, *, case_sensitive: bool) -> bool:
    return any(_glob(p, text, case_sensitive=case_sensitive) for p in patterns)


def _applies(statement: Mapping[str, Any], ctx: RequestContext) -> bool:
    if "Action" in statement:
        if not _matches_any(_listed(statement["Action"]), ctx.action, case_sensitive=False):
            return False
    elif "NotAction" in statement:
        if _matches_any(_listed(statement["NotAction"]), ctx.action, case_sensitive=False):
            return False
    else:
        raise UnsupportedPolicy("a statement needs Action or NotAction")
    if "Resource" in statement:
        if not _matches_any(_listed(statement["Resource"]), ctx.resource, case_sensitive=True):
            return False
    elif "NotResource" in statement:
        if _matches_any(_listed(statement["NotResource"]), ctx.resource, case_sensitive=True):
            return False
    else:
        raise UnsupportedPolicy("an identity policy statement needs Resource or NotResource")
    return _conditions_hold(statement.get("Condition") or {}, ctx)


def statements_of(documents: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """The statements of policy documents given as JSON text or parsed dicts."""
    for document in documents:
        policy = json.loads(document) if isinstance(document, str) else document
        found = (policy or {}).get("Statement") or []
        yield from [found] if isinstance(found, Mapping) else found


def evaluate(documents: Iterable[Any], ctx: RequestContext) -> Decision:
    """IAM's decision for `ctx` under the identity policies `documents`."""
    ctx = RequestContext(ctx.action, ctx.resource, request_keys(ctx.action, ctx.resource, ctx.keys))
    allowed = False
    for statement in statements_of(documents):
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise UnsupportedPolicy(f"statement effect {effect!r}")
        if not _applies(statement, ctx):
            continue
        if effect == "Deny":
            return Decision.EXPLICIT_DENY
        allowed = True
    return Decision.ALLOW if allowed else Decision.IMPLICIT_DENY
