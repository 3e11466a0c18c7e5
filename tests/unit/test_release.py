"""`make release`'s pure parts: one version everywhere, labels stamped into an OCI layout
without touching a layer, and an SBOM read from layers (whiteouts applied) that the
CycloneDX 1.6 schema accepts."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from provisioner.toolchain.installer import wrapper_go_mod
from provisioner.toolchain.versions import ALL_TOOLS, REGISTRY, TOOLS_BY_NAME
from release import oci, sbom
from release.versions import CHART_DIR, ReleaseError, release_version

REPO = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / CHART_DIR).mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(REPO / CHART_DIR / "Chart.yaml", tmp_path / CHART_DIR / "Chart.yaml")
    return tmp_path


def test_the_repositorys_versions_are_one_release() -> None:
    assert release_version(REPO)


def test_a_chart_version_out_of_step_is_refused_naming_each_field(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    chart = repo / CHART_DIR / "Chart.yaml"
    chart.write_text(chart.read_text().replace("\nversion: ", "\nversion: 9.9.9\nx: "))
    with pytest.raises(ReleaseError) as raised:
        release_version(repo)
    message = str(raised.value)
    assert "Chart.yaml version is '9.9.9'" in message
    assert "pyproject.toml [project] version" in message
    assert "appVersion" in message


def test_a_version_helm_would_refuse_is_refused_first(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    for name in ("pyproject.toml", f"{CHART_DIR}/Chart.yaml"):
        path = repo / name
        text = path.read_text().replace('version = "', 'version = "v', 1)
        text = text.replace("version: ", "version: v", 1).replace('appVersion: "', 'appVersion: "v')
        path.write_text(text)
    with pytest.raises(ReleaseError, match="not SemVer 2"):
        release_version(repo)


def test_the_registry_is_distributions_cmd_registry_built_on_request() -> None:
    assert TOOLS_BY_NAME["registry"] is REGISTRY
    assert REGISTRY not in ALL_TOOLS
    assert REGISTRY.package == f"{REGISTRY.module}/cmd/registry"
    assert any(REGISTRY.version in flag for flag in REGISTRY.ldflags)
    assert f"\t{REGISTRY.module} {REGISTRY.version}" in wrapper_go_mod(REGISTRY, "")


def _tar(files: dict[str, bytes | None], mode: int = 0o644) -> bytes:
    """A layer: a file per path, or a bare entry (None) for whiteout markers."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
    return buffer.getvalue()


def _layout(tmp_path: Path, layers: list[bytes], labels: dict[str, str] | None = None) -> Path:
    layout = tmp_path / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    config = put(json.dumps({"architecture": "amd64", "config": {"Labels": labels}}).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": oci.OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", **put(layer)}
            for layer in layers
        ],
    }
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": oci.OCI_MANIFEST, **put(json.dumps(manifest).encode())}],
    }
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return layout


def test_labels_go_into_a_new_config_and_manifest_and_no_layer_changes(tmp_path: Path) -> None:
    layer = _tar({"etc/hostname": b"x\n"})
    layout = _layout(tmp_path, [layer], labels={"io.atomic-gang.inputs": "abc"})
    before = {p.name for p in (layout / "blobs" / "sha256").iterdir()}
    digests = oci.stamp_labels(layout, {"org.opencontainers.image.version": "1.2.3"}, "1.2.3")

    config = oci.read_config(layout)
    assert config["config"]["Labels"] == {
        "io.atomic-gang.inputs": "abc",
        "org.opencontainers.image.version": "1.2.3",
    }
    manifest_blob = oci.blob_path(layout, digests.manifest).read_bytes()
    assert hashlib.sha256(manifest_blob).hexdigest() == digests.manifest.split(":")[1]
    manifest = json.loads(manifest_blob)
    assert manifest["config"]["digest"] == digests.config
    config_blob = oci.blob_path(layout, digests.config).read_bytes()
    assert manifest["config"]["size"] == len(config_blob)
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["annotations"] == {oci.REF_NAME: "1.2.3"}
    after = {p.name for p in (layout / "blobs" / "sha256").iterdir()}
    layer_digest = hashlib.sha256(layer).hexdigest()
    # The layer is kept byte for byte; the old config and manifest are gone.
    assert after == {layer_digest, digests.config[7:], digests.manifest[7:]}
    assert len(before) == 3 and layer_digest in before

    archive = tmp_path / "image.oci.tar"
    oci.write_archive(layout, archive)
    again = tmp_path / "again.oci.tar"
    oci.write_archive(layout, again)
    assert archive.read_bytes() == again.read_bytes()
    with tarfile.open(archive) as tar:
        assert tar.getnames()[:2] == ["oci-layout", "index.json"]


def _metadata(name: str, version: str, *headers: str) -> bytes:
    return "\n".join(
        ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *headers, "", "body"]
    ).encode()


SITE = "opt/venv/lib/python3.11/site-packages"


def test_the_scan_reads_the_final_filesystem_whiteouts_applied(tmp_path: Path) -> None:
    base = _tar(
        {
            f"{SITE}/keep-1.0.dist-info/METADATA": _metadata(
                "keep", "1.0", "License-Expression: MIT"
            ),
            f"{SITE}/gone-2.0.dist-info/METADATA": _metadata("gone", "2.0"),
            f"{SITE}/old-1.0.dist-info/METADATA": _metadata("old", "1.0"),
            "usr/share/doc/x-1.0.dist-info/METADATA": _metadata("not-a-site", "1.0"),
        }
    )
    upper = _tar(
        {
            f"{SITE}/.wh.gone-2.0.dist-info": None,
            # The opaque marker hides the lower layer's file, not this layer's own, even
            # when this layer's comes first in its tar.
            f"{SITE}/old-1.0.dist-info/METADATA": _metadata("old", "1.1"),
            f"{SITE}/old-1.0.dist-info/.wh..wh..opq": None,
            f"{SITE}/new-3.0.dist-info/METADATA": _metadata(
                "new_thing", "3.0", "Classifier: License :: OSI Approved :: Apache Software License"
            ),
        }
    )
    paths = []
    for number, layer in enumerate((base, upper)):
        paths.append(tmp_path / f"layer{number}")
        paths[-1].write_bytes(layer)
    contents = sbom.scan_layers(paths, tmp_path)
    found = {(d.name, d.version, d.licenses) for d in contents.python}
    assert found == {
        ("keep", "1.0", ("MIT",)),
        ("old", "1.1", ()),
        ("new_thing", "3.0", ("Apache Software License",)),
    }
    assert contents.go == ()


def test_a_licence_text_in_the_license_field_is_not_taken_for_a_name() -> None:
    text = (
        "Metadata-Version: 2.1\nName: a\nVersion: 1\n"
        "License: Copyright (c) someone\n        Permission is hereby granted\n\n"
    )
    assert sbom.python_distribution(text, "/x").licenses == ()
    short = "Metadata-Version: 2.1\nName: a\nVersion: 1\nLicense: BSD-3-Clause\n\n"
    assert sbom.python_distribution(short, "/x").licenses == ("BSD-3-Clause",)


BUILD_INFO = {
    "GoVersion": "go1.26.8",
    "Path": "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
    "Main": {"Path": "github.com/pulumi/pulumi/pkg/v3", "Version": "v3.260.0"},
    "Deps": [
        {"Path": "cel.dev/expr", "Version": "v0.25.2"},
        {
            "Path": "github.com/atotto/clipboard",
            "Version": "v0.1.4",
            "Replace": {
                "Path": "github.com/tgummerer/clipboard",
                "Version": "v0.0.0-20241001131231-d02d263e614e",
            },
        },
        {
            "Path": "github.com/nbutton23/zxcvbn-go",
            "Version": "v0.0.0-20180912185939-ae427f1e4c1d",
            "Replace": {"Path": "../patched/0", "Version": "(devel)"},
        },
    ],
}


def test_the_sbom_is_valid_cyclonedx_with_go_replacements_and_patches_stated() -> None:
    binary = sbom.go_binary_from_build_info(BUILD_INFO, "/opt/pulumi/bin/pulumi", "ab" * 32)
    contents = sbom.ImageContents(
        python=(sbom.PythonDistribution("PyYAML", "6.0.4", ("MIT",), "/opt/venv/x/METADATA"),),
        go=(binary,),
    )
    identity = sbom.ImageIdentity(
        "atomic-gang-provisioner",
        "0.1.0",
        "sha256:" + "1" * 64,
        "sha256:" + "2" * 64,
        "d",
        "Apache-2.0",
    )
    text = sbom.sbom_json(sbom.build_sbom(identity, contents))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    by_purl = {c.get("purl"): c for c in document["components"]}
    assert "pkg:pypi/pyyaml@6.0.4" in by_purl
    assert "pkg:golang/github.com/pulumi/pulumi/pkg/v3@v3.260.0" in by_purl
    # A replacement with a version is what was compiled in; the original is not listed.
    assert "pkg:golang/github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e" in by_purl
    assert not any("atotto" in str(p) for p in by_purl)
    patched = by_purl[
        "pkg:golang/github.com/nbutton23/zxcvbn-go@v0.0.0-20180912185939-ae427f1e4c1d"
    ]
    assert "../patched/0" in patched["pedigree"]["notes"]
    assert "word list" in patched["pedigree"]["notes"].lower()
    root = document["metadata"]["component"]
    assert root["type"] == "container"
    assert root["purl"].startswith("pkg:oci/atomic-gang-provisioner@sha256:1111")
    program = next(c for c in document["components"] if c["type"] == "application")
    assert program["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    depends = {d["ref"]: d.get("dependsOn", []) for d in document["dependencies"]}
    assert len(depends[program["bom-ref"]]) == 4
