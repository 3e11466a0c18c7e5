"""The Dockerfile stays in step with the paths the tests run: the same tool installer, the
same pins, the same user as the chart. (No container engine runs here, so the image itself
is never built by the tests; these checks keep its recipe from drifting.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from provisioner.toolchain.installer import PULUMI_PYTHON_LAUNCHER
from provisioner.toolchain.versions import GO_MIN_VERSION

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
MAKEFILE = (REPO / "Makefile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DEPLOYMENT = (REPO / "charts/atomic-gang-provisioner/templates/deployment.yaml").read_text()


def stages() -> dict[str, str]:
    parts = re.split(r"^FROM .* AS (\w+)\s*$", DOCKERFILE, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert match, name
    return match[1]


def test_three_stages() -> None:
    assert list(stages()) == ["pulumi", "python", "runtime"]


def test_the_cli_is_built_by_the_projects_installer() -> None:
    pulumi = stages()["pulumi"]
    assert "python3 -m provisioner.toolchain.installer --only pulumi" in pulumi
    assert PULUMI_PYTHON_LAUNCHER in pulumi
    go = tuple(int(p) for p in arg("GO_VERSION").split(".")[:2])
    assert go >= GO_MIN_VERSION


def test_the_package_is_installed_with_the_makefiles_pins() -> None:
    python = stages()["python"]
    pip = re.search(r"pip==([\d.]+)", MAKEFILE)
    assert pip and f"pip=={pip[1]}" in python
    assert "-c constraints.txt" in MAKEFILE and "-c constraints.txt ." in python
    version = tuple(int(p) for p in arg("PYTHON_VERSION").split("."))
    low, high = re.findall(r"(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert (int(low[0]), int(low[1])) <= version < (int(high[0]), int(high[1]))


def test_the_runtime_is_non_root_with_the_charts_user() -> None:
    runtime = stages()["runtime"]
    user = re.search(r"^USER (\d+):(\d+)$", runtime, re.MULTILINE)
    assert user and user[1] != "0"
    assert f"runAsUser: {user[1]}" in DEPLOYMENT
    assert f"runAsGroup: {user[2]}" in DEPLOYMENT
    assert "COPY --from=pulumi" in runtime and "COPY --from=python" in runtime


def test_the_entrypoint_is_the_packages_command_and_the_charts_config() -> None:
    runtime = stages()["runtime"]
    (script,) = PYPROJECT["project"]["scripts"]
    assert f'ENTRYPOINT ["{script}"]' in runtime
    assert '"--config", "/etc/atomic-gang/settings.yaml"' in runtime
    assert "- /etc/atomic-gang/settings.yaml" in DEPLOYMENT


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = set()
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.MULTILINE):
        copied |= {s.rstrip("/") for s in sources.split()}
    assert copied and copied <= allowed
    for path in copied:
        assert (REPO / path).exists(), path
