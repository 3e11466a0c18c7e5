"""The "What is shown, and where" table (docs/SHOWN.md) names only tests that exist.

Each row's last cell names the tests that pin the claim, in the short forms the table uses:
`tests/unit/test_x.py`, a bare `test_y.py` in the directory of the path before it,
`::test_name` (a function of the file before it; `[param]` and a trailing `*` allowed), and
`tests/unit/test_infra_*.py` globs. A renamed file or test breaks this, not a reader's trust
in the table.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "SHOWN.md"
SECTION = "## What is shown, and where"
# A repository path (a glob allowed), a bare test file, or ::name[param] / ::prefix*.
_REF = re.compile(
    r"((?:tests|devenv|docs|bench|provisioner)/[\w/.*-]+\.(?:py|md)"
    r"|(?<![\w/])test_\w+\.py"
    r"|::[\w*]+(?:\[[^\]]*\])?)"
)


def claim_rows(readme: str) -> list[tuple[str, str]]:
    """(claim, shown by) for every row of the section's table."""
    section = readme.split(SECTION, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| property |"):
            claim, shown = line.rsplit(" | ", 1)
            rows.append((claim.removeprefix("| "), shown.removesuffix(" |")))
    return rows


def missing_references(shown: str, root: Path = ROOT) -> list[str]:
    """The references of a 'shown by' cell that name no file, or no test in their file."""
    missing: list[str] = []
    directory, current = "tests/unit", None
    for match in _REF.finditer(shown):
        ref = match.group(1)
        if ref.startswith("::"):
            name = re.sub(r"\[.*\]$", "", ref[2:])
            if current is None or not current.exists():
                missing.append(ref)
                continue
            pattern = re.escape(name[:-1]) if name.endswith("*") else re.escape(name) + r"\b"
            if not re.search(rf"^\s*(?:async\s+)?def {pattern}", current.read_text(), re.M):
                missing.append(f"{current.relative_to(root)}{ref}")
            continue
        path = ref if "/" in ref else f"{directory}/{ref}"
        directory = path.rsplit("/", 1)[0]
        found = sorted(root.glob(path)) if "*" in path else [root / path]
        current = found[0] if len(found) == 1 else None
        if not found or not all(p.exists() for p in found):
            missing.append(path)
    return missing


def test_every_row_names_tests_that_exist() -> None:
    rows = claim_rows(TABLE.read_text())
    assert len(rows) > 100, "the table was not found"
    stale = {claim[:80]: missing for claim, shown in rows if (missing := missing_references(shown))}
    assert not stale, stale


def test_every_row_names_at_least_one_test_or_document() -> None:
    empty = [claim[:80] for claim, shown in claim_rows(TABLE.read_text()) if not _REF.search(shown)]
    assert not empty, empty


def test_a_renamed_file_or_test_is_found(tmp_path: Path) -> None:
    # The checker fed a table that breaks it, once per form.
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("def test_kept():\n    pass\n")
    (tmp_path / "tests" / "unit" / "test_b.py").write_text("def test_other():\n    pass\n")
    shown = (
        "`tests/unit/test_a.py::test_kept`, `::test_renamed[p]`, `test_b.py`, "
        "`test_gone.py`, `tests/unit/test_a*.py`, `tests/e2e/test_moved.py::test_x`"
    )
    assert missing_references(shown, tmp_path) == [
        "tests/unit/test_a.py::test_renamed[p]",
        "tests/unit/test_gone.py",
        "tests/e2e/test_moved.py",
        "::test_x",
    ]
    table = f"| property | shown by |\n|---|---|\n| a claim | {shown} |\n"
    readme = f"# x\n\n{SECTION}\n\n{table}\n## next\n"
    assert claim_rows(readme) == [("a claim", shown)]
