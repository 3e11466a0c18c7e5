"""The image as an OCI archive: saved by podman as an OCI layout, labelled, then tarred.

The `org.opencontainers.image.*` labels name the commit and the build date, so putting them
in at `podman build` would make every commit a new image (minutes with the vfs storage
driver, and `image/build.sh` could no longer answer "up to date" from the sources). They go
into the saved image's config instead, which is what `buildah config --label` then commit
does: a new config blob, and a new manifest naming it; no layer changes. The layout is
specified by the OCI Image Layout Specification (index.json, oci-layout, blobs/<alg>/<hex>).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.versions import ReleaseError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class ImageDigests:
    manifest: str  # sha256:<hex> of the archive's manifest
    config: str  # sha256:<hex> of its config: podman's image ID once loaded or pulled


def podman(podman_binary: Path, *args: str, timeout: float = 1800) -> str:
    done = subprocess.run(
        [str(podman_binary), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise ReleaseError(f"podman {' '.join(args[:2])} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def save_layout(podman_binary: Path, image: str, layout: Path) -> None:
    """The local image, as podman stores it, written out as an OCI image layout."""
    podman(podman_binary, "save", "--format", "oci-dir", "--output", str(layout), image)


def blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest


def _write_blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest, len(data)


def read_manifest(layout: Path) -> dict[str, Any]:
    index = json.loads((layout / "index.json").read_text())
    manifests = [m for m in index["manifests"] if m["mediaType"] == OCI_MANIFEST]
    if len(manifests) != 1:
        raise ReleaseError(f"{layout}/index.json: expected one image manifest, found {manifests}")
    manifest: dict[str, Any] = json.loads(blob_path(layout, manifests[0]["digest"]).read_bytes())
    return manifest


def read_config(layout: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(
        blob_path(layout, read_manifest(layout)["config"]["digest"]).read_bytes()
    )
    return config


def stamp_labels(layout: Path, labels: dict[str, str], ref_name: str) -> ImageDigests:
    """Add `labels` to the image's config; the index then names the new manifest `ref_name`."""
    index = json.loads((layout / "index.json").read_text())
    (old_descriptor,) = (m for m in index["manifests"] if m["mediaType"] == OCI_MANIFEST)
    manifest = read_manifest(layout)
    old_config = manifest["config"]["digest"]
    config = json.loads(blob_path(layout, old_config).read_bytes())
    config.setdefault("config", {})
    config["config"]["Labels"] = {**(config["config"].get("Labels") or {}), **labels}
    config_digest, config_size = _write_blob(layout, json.dumps(config).encode())
    manifest["config"] = {**manifest["config"], "digest": config_digest, "size": config_size}
    manifest_digest, manifest_size = _write_blob(layout, json.dumps(manifest).encode())
    index["manifests"] = [
        {
            "mediaType": OCI_MANIFEST,
            "digest": manifest_digest,
            "size": manifest_size,
            "annotations": {REF_NAME: ref_name},
        }
    ]
    (layout / "index.json").write_text(json.dumps(index))
    for stale in (old_config, old_descriptor["digest"]):
        if stale not in (config_digest, manifest_digest):
            blob_path(layout, stale).unlink()
    return ImageDigests(manifest=manifest_digest, config=config_digest)


def layer_paths(layout: Path) -> list[Path]:
    """The image's layer tarballs, base first."""
    return [blob_path(layout, layer["digest"]) for layer in read_manifest(layout)["layers"]]


def write_archive(layout: Path, archive: Path) -> None:
    """The layout as an `oci-archive` (what `podman load` and skopeo read): a plain tar, its
    entries in a fixed order with no owner or time, so the same layout makes the same bytes."""

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("oci-layout", "index.json"):
            tar.add(layout / name, arcname=name, filter=plain)
        for path in sorted((layout / "blobs").rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False, filter=plain)
