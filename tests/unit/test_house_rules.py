"""The house rules `make lint` checks (lint/house_rules.py): each fed a tree that breaks it
once, and the checkout itself, which keeps them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lint.house_rules import ALLOWED_LARGE, MAX_LINES, MAX_README_LINES, check

REPO = Path(__file__).resolve().parents[2]
NOTHING_ALLOWED: frozenset[str] = frozenset()


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def messages(root: Path, allowed: frozenset[str] = NOTHING_ALLOWED) -> list[str]:
    return [str(v) for v in check(root, allowed)]


def test_the_checkout_keeps_every_house_rule() -> None:
    assert messages(REPO, ALLOWED_LARGE) == []


def test_make_lint_runs_the_house_rules() -> None:
    lint = (REPO / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m lint.house_rules" in lint


# --- readme-size -------------------------------------------------------------------------
def test_a_readme_over_the_manual_s_limit_fails_and_one_at_it_passes(tmp_path: Path) -> None:
    readme = write(tmp_path, "README.md", "line\n" * MAX_README_LINES)
    assert messages(tmp_path) == []
    readme.write_text("line\n" * (MAX_README_LINES + 1))
    assert messages(tmp_path) == [
        "README.md:701: [readme-size] 701 lines, over the manual's limit of 700. "
        "Fix: move history, figures, evidence and long reference material to a page in docs/ "
        "and link it from the README"
    ]


# --- file-size ---------------------------------------------------------------------------
def test_a_product_file_over_the_limit_fails_naming_it_and_the_fix(tmp_path: Path) -> None:
    write(tmp_path, "stacks/ok.py", "x = 1\n" * MAX_LINES)
    write(tmp_path, "provisioner/big.py", "x = 1\n" * (MAX_LINES + 1))
    assert messages(tmp_path) == [
        "provisioner/big.py:501: [file-size] 501 lines, over the limit of 500. "
        "Fix: split the module by concern (move whole functions or classes to a new module "
        "beside it) until each part is at most 500 lines"
    ]


@pytest.mark.parametrize("top", ["provisioner", "stacks", "infra", "release", "devenv"])
def test_the_product_and_the_dev_environment_are_held_to_the_limit(
    tmp_path: Path, top: str
) -> None:
    write(tmp_path, f"{top}/big.py", "x = 1\n" * (MAX_LINES + 1))
    assert [v.path for v in check(tmp_path, NOTHING_ALLOWED)] == [f"{top}/big.py"]


def test_the_tests_and_the_benchmarks_are_not_held_to_it(tmp_path: Path) -> None:
    for top in ("tests", "bench"):
        write(tmp_path, f"{top}/big.py", "x = 1\n" * (MAX_LINES + 1))
    assert messages(tmp_path) == []


def test_an_allowed_file_passes_until_it_is_split_then_its_allowance_fails(
    tmp_path: Path,
) -> None:
    big = write(tmp_path, "provisioner/big.py", "x = 1\n" * (MAX_LINES + 1))
    allowed = frozenset({"provisioner/big.py"})
    assert messages(tmp_path, allowed) == []
    big.write_text("x = 1\n")
    assert messages(tmp_path, allowed) == [
        "provisioner/big.py:1: [file-size] allowed to exceed 500 lines, but it is gone or no "
        "longer does. Fix: remove provisioner/big.py from ALLOWED_LARGE in lint/house_rules.py"
    ]


# --- state-as-string ---------------------------------------------------------------------
FIX_STATE = (
    "Fix: compare with the enum member itself (CheckState.READY, Phase.IDLE; "
    "`x in (Phase.IDLE, Phase.RELEASING)`), never with its text or .value"
)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('ready = ours.state == "Ready"', "'Ready'"),
        ('busy = "Retry" != check.state', "'Retry'"),
        ('quiet = phase in ("Idle", "KeepWarm")', "('Idle', 'KeepWarm')"),
        ('done = status.phase not in ["Releasing"]', "['Releasing']"),
        ("idle = status.phase == Phase.IDLE.value", "Phase.IDLE.value (an enum's text)"),
        ('text = c.CheckState.READY == "Ready"', "'Ready'"),
        ('warm = current_phase == f"{name}"', "f'{name}'"),
    ],
)
def test_a_string_compared_with_a_state_or_phase_in_controllers_fails(
    tmp_path: Path, line: str, said: str
) -> None:
    write(tmp_path, "provisioner/controllers/pool/x.py", f"def f():\n    {line}\n")
    assert messages(tmp_path) == [
        f"provisioner/controllers/pool/x.py:2: [state-as-string] {said} compared with a "
        f"check state or a phase. {FIX_STATE}"
    ]


def test_enum_members_and_other_strings_pass(tmp_path: Path) -> None:
    write(
        tmp_path,
        "provisioner/controllers/x.py",
        """\
        def f():
            a = ours.state == CheckState.READY
            b = phase in (Phase.IDLE, Phase.RELEASING)
            c = status.phase is Phase.JOINING
            d = name == "pool-a"  # not a state
            e = stack_name in ("a", "b")
        """,
    )
    # Only the controllers are held to it: a model's parser may read the text.
    write(tmp_path, "provisioner/api/x.py", 'ok = status.phase == "Idle"\n')
    assert messages(tmp_path) == []


# --- event-reason ------------------------------------------------------------------------
FIX_REASON = (
    "Fix: add the reason to EventReason in provisioner/api/constants.py (keeping the text "
    "users see) and pass c.EventReason.<NAME>"
)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('self._recorder.normal(obj, "PoolCreated", "made")', "'PoolCreated'"),
        ('recorder.warning(obj, "Lost", "gone")', "'Lost'"),
        ('self._recorder.record(obj, kind, "Claimed", text)', "'Claimed'"),
        ('self._recorder.record(obj, kind, reason="Claimed", message=text)', "'Claimed'"),
        ('Event(c.EVENT_NORMAL, "Launched", "up")', "'Launched'"),
        ('CheckUpdate(CheckState.PENDING, "wait", "Waiting")', "'Waiting'"),
        ('CheckUpdate(CheckState.PENDING, "wait", reason=f"{x}")', "f'{x}'"),
        ('self._tell_owner(owner, "ClaimReleased", text)', "'ClaimReleased'"),
    ],
)
def test_a_literal_event_reason_anywhere_in_the_product_fails(
    tmp_path: Path, line: str, said: str
) -> None:
    write(tmp_path, "provisioner/commands/x.py", f"def f():\n    {line}\n")
    assert messages(tmp_path) == [
        f"provisioner/commands/x.py:2: [event-reason] Event reason {said} is not an "
        f"EventReason member. {FIX_REASON}"
    ]


def test_the_dev_environment_is_not_held_to_the_product_s_reasons(tmp_path: Path) -> None:
    write(tmp_path, "devenv/x.py", 'recorder.normal(obj, "Simulated", "a node joined")\n')
    assert messages(tmp_path) == []


def test_enum_reasons_relayed_reasons_and_loggers_pass(tmp_path: Path) -> None:
    write(
        tmp_path,
        "provisioner/x.py",
        """\
        def f():
            self._recorder.normal(obj, c.EventReason.POOL_CREATED, "made")
            self._recorder.record(obj, kind, update.reason, "text")
            Event(c.EVENT_WARNING, err.reason, err.message)
            log.warning("event %s %s not recorded", "x", "y")
        """,
    )
    assert messages(tmp_path) == []


def test_the_command_prints_each_violation_and_fails(tmp_path: Path) -> None:
    write(tmp_path, "provisioner/controllers/x.py", 'ready = ours.state == "Ready"\n')
    run = subprocess.run(
        [sys.executable, "-m", "lint.house_rules", "--root", str(tmp_path), "--no-allowances"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run
    assert run.stdout.splitlines() == [
        f"provisioner/controllers/x.py:1: [state-as-string] 'Ready' compared with a check "
        f"state or a phase. {FIX_STATE}",
        "house rules: 1 violation(s); see lint/house_rules.py",
    ]
