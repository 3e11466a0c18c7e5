"""One version for the release: pyproject's, the chart's `version` and its `appVersion`.

The chart's appVersion is the image tag the chart installs by default, and the image is
labelled with pyproject's version, so all three must be one; `make release` refuses to
package a chart whose numbers drifted apart rather than publish a chart that pulls another
release's image.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

CHART_DIR = Path("charts") / "atomic-gang-provisioner"
# Helm refuses a chart version that is not SemVer 2; so does this, before packaging.
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")


class ReleaseError(RuntimeError):
    """The release cannot be made; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class ProjectFacts:
    """What pyproject.toml says about the product, for the labels and the SBOM."""

    name: str
    version: str
    description: str
    license: str
    dependencies: tuple[str, ...]


def project_facts(repo: Path) -> ProjectFacts:
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return ProjectFacts(
        name=str(project["name"]),
        version=str(project["version"]),
        description=str(project.get("description", "")),
        license=str(project.get("license", "")),
        dependencies=tuple(str(d) for d in project.get("dependencies", ())),
    )


def release_version(repo: Path) -> str:
    """The release's version, once pyproject and Chart.yaml are checked to agree."""
    version = project_facts(repo).version
    chart_file = repo / CHART_DIR / "Chart.yaml"
    chart = yaml.safe_load(chart_file.read_text())
    found = {
        "pyproject.toml [project] version": version,
        f"{CHART_DIR}/Chart.yaml version": str(chart.get("version", "")),
        f"{CHART_DIR}/Chart.yaml appVersion": str(chart.get("appVersion", "")),
    }
    if len(set(found.values())) != 1:
        listed = ", ".join(f"{where} is {value!r}" for where, value in found.items())
        raise ReleaseError(
            f"the release's versions differ: {listed}. Set all three to the release's "
            "version (the chart's appVersion is the image tag it installs)."
        )
    if not _SEMVER.match(version):
        raise ReleaseError(
            f"pyproject.toml [project] version {version!r} is not SemVer 2 (MAJOR.MINOR.PATCH), "
            "which Helm requires of a chart version."
        )
    return version
