"""The house rules `make lint` checks, so that none of them is kept by memory alone.

Run as ``python -m lint.house_rules [--root DIR]``; it prints one line per violation,
``path:line: [rule] what is wrong. Fix: what to do``, and exits 1 when there is any.

* ``file-size``: a file of the product (``PRODUCT_ROOTS``) or of the world it is tested in
  (``devenv/``) holds at most ``MAX_LINES`` lines, so it reads in one sitting (STYLE.md
  habit 12). The tests and the benchmarks are not held to it.
* ``state-as-string``: in ``provisioner/controllers/`` no string is compared with a check
  state or a pool phase (``x.state == "Ready"``, ``phase in ("Idle", ...)``,
  ``phase == Phase.IDLE.value``): the enum member is compared, never its text (habit 17).
* ``event-reason``: no string literal is passed as an Event's reason anywhere in the
  product; every reason the product chooses is an ``EventReason`` member (habit 10). A
  reason relayed from an error (an EC2 code, a refusal's machine reason) is a value, not a
  literal, and is not this rule's business.
* ``readme-size``: ``README.md`` is a manual of at most ``MAX_README_LINES`` lines; history,
  figures and the evidence table live in ``docs/``.

This module is tooling: it is not in the product's wheel and imports nothing of it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PRODUCT_ROOTS: Final = ("provisioner", "stacks", "infra", "release")
SIZED_ROOTS: Final = (*PRODUCT_ROOTS, "devenv")
MAX_LINES: Final = 500
MAX_README_LINES: Final = 700
# Files allowed over MAX_LINES for a while (a split under way on a branch of its own).
# Empty: every file is within the limit. An entry no longer over it is itself reported.
ALLOWED_LARGE: Final[frozenset[str]] = frozenset()

CONTROLLERS: Final = "provisioner/controllers"
# A name that holds a check state or a phase: `state`, `phase`, `x.state`, `current_phase`.
_STATE_NAME: Final = re.compile(r"(^|_)(state|phase)$")
_STATE_ENUMS: Final = frozenset({"CheckState", "Phase"})

# Where an Event's reason is passed: (callee name, index of the reason among the
# positional arguments). A method is matched on a receiver whose name holds "recorder".
_RECORDER_METHODS: Final = {"normal": 1, "warning": 1, "record": 2}
_EVENT_BUILDERS: Final = {"Event": 1, "CheckUpdate": 2, "_tell_owner": 1}


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    rule: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}. Fix: {self.fix}"


def check(root: Path, allowed_large: frozenset[str] = ALLOWED_LARGE) -> list[Violation]:
    """Every violation of the house rules in the tree at `root`."""
    found: list[Violation] = []
    for path in _files(root, SIZED_ROOTS):
        rel = path.relative_to(root).as_posix()
        found += _file_size(rel, path.read_text(encoding="utf-8"), allowed_large)
    for path in _files(root, PRODUCT_ROOTS):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        if rel.startswith(f"{CONTROLLERS}/"):
            found += _state_as_string(rel, tree)
        found += _event_reasons(rel, tree)
    found += _stale_allowances(root, allowed_large)
    found += _readme_size(root)
    return sorted(found, key=lambda v: (v.path, v.line, v.rule))


def _files(root: Path, tops: Sequence[str]) -> Iterator[Path]:
    for top in tops:
        base = root / top
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


# --- file-size ---------------------------------------------------------------------------
def _file_size(rel: str, text: str, allowed_large: frozenset[str]) -> list[Violation]:
    lines = len(text.splitlines())
    if lines <= MAX_LINES or rel in allowed_large:
        return []
    return [
        Violation(
            rel,
            MAX_LINES + 1,
            "file-size",
            f"{lines} lines, over the limit of {MAX_LINES}",
            "split the module by concern (move whole functions or classes to a new module "
            "beside it) until each part is at most 500 lines",
        )
    ]


def _stale_allowances(root: Path, allowed_large: frozenset[str]) -> list[Violation]:
    stale: list[Violation] = []
    for rel in sorted(allowed_large):
        path = root / rel
        if path.is_file() and len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES:
            continue
        stale.append(
            Violation(
                rel,
                1,
                "file-size",
                f"allowed to exceed {MAX_LINES} lines, but it is gone or no longer does",
                f"remove {rel} from ALLOWED_LARGE in lint/house_rules.py",
            )
        )
    return stale


# --- readme-size -------------------------------------------------------------------------
def _readme_size(root: Path) -> list[Violation]:
    readme = root / "README.md"
    if not readme.is_file():
        return []
    lines = len(readme.read_text(encoding="utf-8").splitlines())
    if lines <= MAX_README_LINES:
        return []
    return [
        Violation(
            "README.md",
            MAX_README_LINES + 1,
            "readme-size",
            f"{lines} lines, over the manual's limit of {MAX_README_LINES}",
            "move history, figures, evidence and long reference material to a page in docs/ "
            "and link it from the README",
        )
    ]


# --- state-as-string ---------------------------------------------------------------------
def _state_as_string(rel: str, tree: ast.AST) -> list[Violation]:
    found: list[Violation] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        texts = [t for o in operands if (t := _string_side(o)) is not None]
        if not texts or not any(_holds_state(o) for o in operands):
            continue
        found.append(
            Violation(
                rel,
                node.lineno,
                "state-as-string",
                f"{texts[0]} compared with a check state or a phase",
                "compare with the enum member itself (CheckState.READY, Phase.IDLE; "
                "`x in (Phase.IDLE, Phase.RELEASING)`), never with its text or .value",
            )
        )
    return found


def _string_side(node: ast.expr) -> str | None:
    """How an operand that is text reads in the message, or None when it is not text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    if isinstance(node, ast.JoinedStr):
        return ast.unparse(node)
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and any(
        _string_side(e) is not None for e in node.elts
    ):
        return ast.unparse(node)
    if _enum_value(node):
        return f"{ast.unparse(node)} (an enum's text)"
    return None


def _enum_value(node: ast.expr) -> bool:
    """`Phase.IDLE.value`, `c.CheckState.READY.value`: an enum member's text."""
    if not (isinstance(node, ast.Attribute) and node.attr == "value"):
        return False
    member = node.value
    return isinstance(member, ast.Attribute) and _last_name(member.value) in _STATE_ENUMS


def _holds_state(node: ast.expr) -> bool:
    """An operand that holds a check state or a phase: a name or attribute named like one
    (`.value` of it too), or a member of CheckState or Phase."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and _last_name(node.value) in _STATE_ENUMS:
        return True
    name = _last_name(node)
    return name is not None and _STATE_NAME.search(name) is not None


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


# --- event-reason ------------------------------------------------------------------------
def _event_reasons(rel: str, tree: ast.AST) -> list[Violation]:
    found: list[Violation] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        index = _reason_index(node.func)
        if index is None:
            continue
        reason = node.args[index] if len(node.args) > index else None
        reason = next((k.value for k in node.keywords if k.arg == "reason"), reason)
        if reason is None or _string_side(reason) is None:
            continue
        found.append(
            Violation(
                rel,
                reason.lineno,
                "event-reason",
                f"Event reason {_string_side(reason)} is not an EventReason member",
                "add the reason to EventReason in provisioner/api/constants.py (keeping the "
                "text users see) and pass c.EventReason.<NAME>",
            )
        )
    return found


def _reason_index(func: ast.expr) -> int | None:
    if isinstance(func, ast.Attribute):
        receiver = ast.unparse(func.value).lower()
        if func.attr in _RECORDER_METHODS and "recorder" in receiver:
            return _RECORDER_METHODS[func.attr]
        return _EVENT_BUILDERS.get(func.attr)
    if isinstance(func, ast.Name):
        return _EVENT_BUILDERS.get(func.id)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout to check")
    parser.add_argument(
        "--no-allowances", action="store_true", help="hold ALLOWED_LARGE's files to the limit too"
    )
    args = parser.parse_args(argv)
    violations = check(args.root, frozenset() if args.no_allowances else ALLOWED_LARGE)
    for violation in violations:
        print(violation)
    if violations:
        print(f"house rules: {len(violations)} violation(s); see lint/house_rules.py")
        return 1
    print(f"house rules: clean ({', '.join(SIZED_ROOTS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
