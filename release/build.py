"""Makes the release into one directory (`make release` writes dist/):

atomic-gang-provisioner-<version>.tgz          the chart (`helm package`)
atomic-gang-provisioner-<version>.oci.tar      the image (`podman load -i` reads it)
atomic-gang-provisioner-<version>.cdx.json     the image's CycloneDX SBOM
release.json                                   digests, sizes and how long each step took
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from release import oci, sbom
from release.versions import CHART_DIR, ReleaseError, project_facts, release_version

IMAGE_NAME = "atomic-gang-provisioner"


@dataclass(frozen=True)
class Release:
    version: str
    chart: Path
    archive: Path
    sbom: Path
    manifest_digest: str
    config_digest: str
    labels: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def oci_labels(repo: Path, version: str) -> dict[str, str]:
    """The OCI annotation keys (OCI Image Format Specification, Annotations), as labels.

    `revision` is the commit the image was built from, with `-dirty` when the checkout had
    uncommitted changes (`image/build.sh` builds what the checkout holds); `created` is that
    commit's time unless the checkout is dirty, so one commit makes one set of labels.
    """
    facts = project_facts(repo)
    revision = _git(repo, "describe", "--always", "--dirty", "--abbrev=40")
    if revision.endswith("-dirty"):
        created = datetime.now(UTC)
    else:
        created = datetime.fromtimestamp(int(_git(repo, "log", "-1", "--format=%ct")), UTC)
    return {
        "org.opencontainers.image.title": facts.name,
        "org.opencontainers.image.description": facts.description,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.licenses": facts.license,
        "org.opencontainers.image.vendor": facts.name,
    }


def package_chart(repo: Path, helm: Path, version: str, out: Path) -> Path:
    done = subprocess.run(
        [str(helm), "package", str(repo / CHART_DIR), "--destination", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(f"helm package failed: {done.stderr.strip()}")
    chart = out / f"{IMAGE_NAME}-{version}.tgz"
    if not chart.is_file():
        raise ReleaseError(f"helm package did not write {chart}: {done.stdout.strip()}")
    return chart


def make_release(repo: Path, out: Path, *, image: str, helm: Path, podman: Path) -> Release:
    seconds: dict[str, float] = {}
    started = time.monotonic()
    version = release_version(repo)
    facts = project_facts(repo)
    out.mkdir(parents=True, exist_ok=True)
    chart = package_chart(repo, helm, version, out)
    seconds["chart"] = time.monotonic() - started

    archive = out / f"{IMAGE_NAME}-{version}.oci.tar"
    sbom_file = out / f"{IMAGE_NAME}-{version}.cdx.json"
    labels = oci_labels(repo, version)
    with tempfile.TemporaryDirectory(prefix="atomic-gang-release-", dir=out) as scratch:
        layout = Path(scratch) / "layout"
        step = time.monotonic()
        oci.save_layout(podman, image, layout)
        # The name `podman load` gives it (localhost/ prefixed), and `oci-archive:<file>:<name>`
        # picks it by; a tag alone would be loaded as a repository named after the tag.
        digests = oci.stamp_labels(layout, labels, f"{IMAGE_NAME}:{version}")
        seconds["image save and label"] = time.monotonic() - step

        step = time.monotonic()
        contents = sbom.scan_image_layout(oci.layer_paths(layout))
        identity = sbom.ImageIdentity(
            name=IMAGE_NAME,
            version=version,
            manifest_digest=digests.manifest,
            config_digest=digests.config,
            description=facts.description,
            license=facts.license,
        )
        sbom_file.write_text(sbom.sbom_json(sbom.build_sbom(identity, contents)))
        seconds["sbom"] = time.monotonic() - step

        step = time.monotonic()
        partial = archive.with_suffix(".tar.partial")
        oci.write_archive(layout, partial)
        partial.replace(archive)
        seconds["archive"] = time.monotonic() - step
        shutil.rmtree(layout)
    seconds["total"] = time.monotonic() - started
    made = Release(
        version=version,
        chart=chart,
        archive=archive,
        sbom=sbom_file,
        manifest_digest=digests.manifest,
        config_digest=digests.config,
        labels=labels,
        seconds={k: round(v, 1) for k, v in seconds.items()},
    )
    summary = {
        **{k: str(v) if isinstance(v, Path) else v for k, v in asdict(made).items()},
        "bytes": {p.name: p.stat().st_size for p in (chart, archive, sbom_file)},
        "pythonDistributions": len(contents.python),
        "goModules": sorted({m.path for b in contents.go for m in (b.main, *b.modules)}),
    }
    (out / "release.json").write_text(json.dumps(summary, indent=2) + "\n")
    return made
