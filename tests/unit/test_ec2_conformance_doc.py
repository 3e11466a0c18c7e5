"""docs/EC2-CONFORMANCE.md stays true to the code: every row names an AWS page (or says the
documentation does not settle it), at least one test, and only emulator code and tests that
exist. A renamed test or a moved function breaks this, not a reader's trust in the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "EC2-CONFORMANCE.md"
# A repository path, optionally followed by ::Symbol or ::Class.method.
_REF = re.compile(r"((?:tests|devenv|provisioner|stacks)/[\w/]+\.py)(?:::(\w+)(?:\.(\w+))?)?")


def _rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("| behaviour"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _defines(path: Path, name: str) -> bool:
    return (
        re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\b", path.read_text(), re.M)
        is not None
    )


def missing_references(cell: str) -> list[str]:
    """The references in ``cell`` that name no file, or no definition in their file."""
    missing = []
    for match in _REF.finditer(cell):
        path, symbol, member = ROOT / match.group(1), match.group(2), match.group(3)
        if (
            not path.exists()
            or (symbol and not _defines(path, symbol))
            or (member and not _defines(path, member))
        ):
            missing.append(match.group(0))
    return missing


def test_the_table_has_rows() -> None:
    assert len(_rows()) >= 30


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[0][:60])
def test_each_row_names_a_page_and_a_test_that_exist(row: list[str]) -> None:
    assert len(row) == 4, f"a row has behaviour | page | emulator code | test: {row}"
    behaviour, page, code, tests = row
    assert page, f"no AWS page named for {behaviour!r}"
    assert "tests/" in tests, f"no test named for {behaviour!r}"
    assert missing_references(code + " " + tests) == [], behaviour


def test_a_stale_reference_is_found() -> None:
    assert missing_references("tests/unit/test_ec2_conformance_doc.py::no_such_test") == [
        "tests/unit/test_ec2_conformance_doc.py::no_such_test"
    ]
    assert missing_references("devenv/emulator/no_such_module.py") == [
        "devenv/emulator/no_such_module.py"
    ]
    assert missing_references("devenv/emulator/placement.py::PlacementBook.no_such") != []
    assert missing_references("devenv/emulator/placement.py::PlacementBook.find") == []
