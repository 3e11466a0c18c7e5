"""The Dockerfile stays in step with the paths the tests run: the same tool installer, the
same pins, the same user as the chart, and with `make image` (image/build.sh), which builds
it on a base made here and hands it the toolchain's Pulumi CLI. The image itself is built
and run by tests/image (`make test-image`); these checks are the fast half."""

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
BUILD_SH = (REPO / "image/build.sh").read_text()
BASE_SH = (REPO / "image/base.sh").read_text()


def stages() -> dict[str, str]:
    parts = re.split(r"^FROM .* AS ([\w-]+)\s*$", DOCKERFILE, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert match, name
    return match[1]


def test_stages() -> None:
    assert list(stages()) == ["pulumi-go", "pulumi-context", "pulumi", "python", "runtime"]
    assert re.search(r"^FROM \$\{PULUMI_STAGE\} AS pulumi$", DOCKERFILE, re.MULTILINE)
    assert arg("PULUMI_STAGE") == "pulumi-go"  # a registry user's default: no build context


def test_the_cli_is_built_by_the_projects_installer() -> None:
    pulumi = stages()["pulumi-go"]
    assert "python3 -m provisioner.toolchain --only pulumi --print-path" in pulumi
    assert PULUMI_PYTHON_LAUNCHER in pulumi
    go = re.fullmatch(r"golang:(\d+)\.(\d+)\.\d+-bookworm", arg("GO_BASE"))
    assert go and (int(go[1]), int(go[2])) >= GO_MIN_VERSION


def test_make_image_hands_over_the_toolchains_cli_and_a_base_made_here() -> None:
    context = stages()["pulumi-context"]
    assert f"COPY --from=pulumi-cli pulumi {PULUMI_PYTHON_LAUNCHER} /out/bin/" in context
    assert "--build-arg PULUMI_STAGE=pulumi-context" in BUILD_SH
    assert '--build-context pulumi-cli="$pulumi_dir"' in BUILD_SH
    assert "-m provisioner.toolchain --only pulumi --print-path" in BUILD_SH
    assert '--build-arg PYTHON_BASE="$base"' in BUILD_SH
    # The base made here is the registry default's Debian release.
    suite = re.search(r"^SUITE=(\w+)$", BASE_SH, re.MULTILINE)
    assert suite and arg("PYTHON_BASE").endswith(f"-{suite[1]}")
    assert "image: $(STAMP) image-host" in MAKEFILE and "./image/build.sh" in MAKEFILE


def test_the_package_is_installed_with_the_makefiles_pins() -> None:
    python = stages()["python"]
    pip = re.search(r"pip==([\d.]+)", MAKEFILE)
    assert pip and f"pip=={pip[1]}" in python
    assert "-c constraints.txt" in MAKEFILE and "-c constraints.txt ." in python
    base = re.fullmatch(r"python:(\d+)\.(\d+)-slim-bookworm", arg("PYTHON_BASE"))
    assert base
    version = (int(base[1]), int(base[2]))
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
    # The product's command (the other script is the same CLI under kubectl's plugin name).
    scripts = PYPROJECT["project"]["scripts"]
    (script,) = [name for name, target in scripts.items() if target.endswith(":main")]
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
    # The world we test in never reaches the image.
    assert not {"devenv", "tests", "bench", "infra", ".venv"} & allowed
    for path in copied:
        assert (REPO / path).exists(), path
