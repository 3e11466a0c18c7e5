"""The product wheel ships the product only: no dev environment, no emulator, no moto.

Builds the wheel from pyproject.toml exactly as a release would (no build isolation, so
the venv's pinned setuptools builds it) and reads every Python file in it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV_ONLY = ("devenv", "moto", "werkzeug", "waitress", "tests", "bench")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build_dir = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(REPO),
        ],
        check=True,
        cwd=build_dir,
        capture_output=True,
    )
    (built,) = out.glob("atomic_gang_provisioner-*.whl")
    return built


def _imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_wheel_holds_no_dev_environment_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if name.endswith(".py")}
    assert top_level == {"provisioner", "stacks", "infra"}
    assert "provisioner/toolchain/installer.py" in names
    assert not [n for n in names if n.split("/")[0] in DEV_ONLY]


def test_no_module_in_the_wheel_imports_the_dev_environment(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    offenders = {
        name: sorted(_imported_roots(archive.read(name).decode()) & set(DEV_ONLY))
        for name in archive.namelist()
        if name.endswith(".py")
    }
    assert {name: roots for name, roots in offenders.items() if roots} == {}


def test_the_check_sees_a_dev_import() -> None:
    # The check must be able to fail: a module importing the emulator is caught.
    assert _imported_roots("from devenv.emulator import EmulatorClient\nimport moto") == {
        "devenv",
        "moto",
    }
