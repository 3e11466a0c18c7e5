"""The image's CycloneDX SBOM, read from the image's own layers.

What is listed is what the image's filesystem holds, not what the host has installed: the
layers are read base first, OCI whiteouts applied (the OCI Image Layer Filesystem Changeset
rules: `.wh.<name>` deletes a path, `.wh..wh..opq` empties a directory of lower layers), and
in the resulting tree
- every Python distribution (`*.dist-info/METADATA` under a site- or dist-packages
  directory) becomes a `library` with its `pkg:pypi` purl and licence;
- every Go binary (an ELF file carrying Go's build-info marker) becomes an `application`
  with its SHA-256, and the modules `go version -m` reads from it become its dependencies,
  each a `library` with its `pkg:golang` purl; a module the build replaced with an edited
  copy (the toolchain's `patches`) says so in its pedigree.
Debian's own packages in the base are not listed (left for a later SBOM section).
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import (
    Component,
    ComponentType,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.model.license import License
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from provisioner.toolchain.patches import ModulePatch
from provisioner.toolchain.versions import TOOLS_BY_NAME
from release.versions import ReleaseError

_METADATA = re.compile(r"(?:^|/)(?:site|dist)-packages/[^/]+\.dist-info/METADATA$")
_ELF = b"\x7fELF"
_GO_BUILDINFO = b"\xff Go buildinf:"
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class PythonDistribution:
    name: str
    version: str
    licenses: tuple[str, ...]  # an SPDX expression, or licence names when there is none
    location: str  # the METADATA file's path in the image


@dataclass(frozen=True)
class GoModule:
    path: str
    version: str
    replaced_by: str = ""  # a local path: an edited copy of the module was compiled in


@dataclass(frozen=True)
class GoBinary:
    location: str
    sha256: str
    go_version: str
    main: GoModule
    modules: tuple[GoModule, ...]


@dataclass(frozen=True)
class ImageContents:
    python: tuple[PythonDistribution, ...]
    go: tuple[GoBinary, ...]


def _norm(name: str) -> str:
    return str(PurePosixPath("/", name)).lstrip("/")


def _under(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


def _apply_whiteout(found: dict[str, Any], path: str) -> None:
    parent, base = str(PurePosixPath(path).parent), PurePosixPath(path).name
    parent = "" if parent == "." else parent
    if base == _OPAQUE:
        doomed = [p for p in found if _under(p, parent) and p != parent]
    else:
        hidden = base[len(_WHITEOUT) :]
        target = str(PurePosixPath(parent, hidden)) if parent else hidden
        doomed = [p for p in found if _under(p, target)]
    for p in doomed:
        del found[p]


def scan_layers(layers: Iterable[Path], scratch: Path) -> ImageContents:
    """The Python distributions and Go binaries in the filesystem the layers make."""
    metadata: dict[str, str] = {}
    binaries: dict[str, Path] = {}
    for number, layer in enumerate(layers):
        # A layer's whiteouts act on the layers below it only, wherever they sit in its tar.
        whiteouts: list[str] = []
        written: set[str] = set()
        layer_metadata: dict[str, str] = {}
        layer_binaries: dict[str, Path] = {}
        with tarfile.open(layer, "r:*") as tar:
            for member in tar:
                path = _norm(member.name)
                if PurePosixPath(path).name.startswith(_WHITEOUT):
                    whiteouts.append(path)
                    continue
                written.add(path)
                if not member.isfile():
                    continue
                if _METADATA.search(path):
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    layer_metadata[path] = extracted.read().decode("utf-8", "replace")
                elif member.mode & 0o111 and member.size > len(_GO_BUILDINFO):
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    if extracted.read(4) != _ELF:
                        continue
                    data = _ELF + extracted.read()
                    if _GO_BUILDINFO in data:
                        copy = (
                            scratch / f"{number}-{len(layer_binaries)}-{PurePosixPath(path).name}"
                        )
                        copy.write_bytes(data)
                        layer_binaries[path] = copy
        for whiteout in whiteouts:
            _apply_whiteout(metadata, whiteout)
            _apply_whiteout(binaries, whiteout)
        # Whatever this layer has at a path replaces what the layers below had there.
        for path in written:
            metadata.pop(path, None)
            binaries.pop(path, None)
        metadata.update(layer_metadata)
        binaries.update(layer_binaries)
    python = tuple(
        sorted(
            (python_distribution(text, "/" + path) for path, text in metadata.items()),
            key=lambda d: (d.name.lower(), d.location),
        )
    )
    go = tuple(go_binary(copy, "/" + path) for path, copy in sorted(binaries.items()))
    return ImageContents(python=python, go=go)


def python_distribution(metadata_text: str, location: str) -> PythonDistribution:
    """One distribution from its core metadata (the Core metadata specifications)."""
    message = email.parser.Parser().parsestr(metadata_text, headersonly=True)
    licenses: tuple[str, ...] = ()
    expression = (message.get("License-Expression") or "").strip()
    free_text = (message.get("License") or "").strip()
    classifiers = [
        c.split("::")[-1].strip()
        for c in message.get_all("Classifier") or []
        if c.startswith("License ::") and c.count("::") >= 2
    ]
    if expression:
        licenses = (expression,)
    elif classifiers:
        licenses = tuple(classifiers)
    elif free_text and "\n" not in free_text and len(free_text) <= 100:
        # Some distributions put the whole licence text here; only a name is a name.
        licenses = (free_text,)
    return PythonDistribution(
        name=str(message["Name"]),
        version=str(message["Version"]),
        licenses=licenses,
        location=location,
    )


def go_binary(binary: Path, location: str) -> GoBinary:
    """One Go binary's modules, as `go version -m` reads them from its build info."""
    go = shutil.which("go")
    if go is None:
        raise ReleaseError("Go is not on PATH: the SBOM reads Go modules with `go version -m`.")
    done = subprocess.run(
        [go, "version", "-m", "-json", str(binary)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(f"go version -m {location} failed: {done.stderr.strip()}")
    return go_binary_from_build_info(
        json.loads(done.stdout), location, hashlib.sha256(binary.read_bytes()).hexdigest()
    )


def go_binary_from_build_info(info: dict[str, Any], location: str, sha256: str) -> GoBinary:
    def module(entry: dict[str, Any]) -> GoModule:
        replace = entry.get("Replace")
        if replace is None:
            return GoModule(entry["Path"], entry["Version"])
        if replace.get("Version") and replace["Version"] != "(devel)":
            return GoModule(replace["Path"], replace["Version"])
        return GoModule(entry["Path"], entry["Version"], replaced_by=replace["Path"])

    return GoBinary(
        location=location,
        sha256=sha256,
        go_version=str(info["GoVersion"]),
        main=module(info["Main"]),
        modules=tuple(module(d) for d in info.get("Deps") or ()),
    )


def pypi_purl(name: str, version: str) -> PackageURL:
    return PackageURL(type="pypi", name=re.sub(r"[-_.]+", "-", name).lower(), version=version)


def golang_purl(module: GoModule) -> PackageURL:
    namespace, _, name = module.path.rpartition("/")
    return PackageURL(type="golang", namespace=namespace or None, name=name, version=module.version)


def _known_patches() -> dict[str, ModulePatch]:
    return {p.module: p for tool in TOOLS_BY_NAME.values() for p in tool.patches}


def _licenses(values: tuple[str, ...]) -> list[License]:
    factory = LicenseFactory()
    if len(values) == 1:
        return [factory.make_from_string(values[0])]
    return [factory.make_with_name(v) for v in values]


@dataclass(frozen=True)
class ImageIdentity:
    name: str
    version: str
    manifest_digest: str
    config_digest: str
    description: str
    license: str


def build_sbom(image: ImageIdentity, contents: ImageContents) -> Bom:
    bom = Bom()
    root = Component(
        type=ComponentType.CONTAINER,
        name=image.name,
        version=image.version,
        description=image.description,
        bom_ref=f"image:{image.name}@{image.manifest_digest}",
        purl=PackageURL(
            type="oci",
            name=image.name,
            version=image.manifest_digest,
            qualifiers={"tag": image.version},
        ),
        licenses=_licenses((image.license,)) if image.license else [],
        properties=[Property(name="oci:image:config-digest", value=image.config_digest)],
    )
    bom.metadata.component = root
    direct: list[Component] = []
    for dist in contents.python:
        purl = pypi_purl(dist.name, dist.version)
        ref = f"{purl.to_string()}#{dist.location}"
        component = Component(
            type=ComponentType.LIBRARY,
            name=dist.name,
            version=dist.version,
            purl=purl,
            bom_ref=ref,
            licenses=_licenses(dist.licenses) if dist.licenses else [],
            properties=[Property(name="image:path", value=dist.location)],
        )
        bom.components.add(component)
        direct.append(component)
    patches = _known_patches()
    go_components: dict[str, Component] = {}
    for binary in contents.go:
        program = Component(
            type=ComponentType.APPLICATION,
            name=PurePosixPath(binary.location).name,
            version=binary.main.version,
            bom_ref=f"file:{binary.location}",
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=binary.sha256)],
            properties=[
                Property(name="image:path", value=binary.location),
                Property(name="go:version", value=binary.go_version),
                Property(name="go:main-module", value=binary.main.path),
            ],
        )
        bom.components.add(program)
        direct.append(program)
        uses: list[Component] = []
        for module in (binary.main, *binary.modules):
            purl = golang_purl(module)
            ref = purl.to_string()
            if ref not in go_components:
                pedigree = None
                if module.replaced_by:
                    patch = patches.get(module.path)
                    why = patch.why if patch else "an edited copy of the module"
                    pedigree = Pedigree(
                        patches=[Patch(type=PatchClassification.UNOFFICIAL)],
                        notes=f"compiled from {module.replaced_by}: {why}",
                    )
                go_components[ref] = Component(
                    type=ComponentType.LIBRARY,
                    name=module.path,
                    version=module.version,
                    purl=purl,
                    bom_ref=ref,
                    pedigree=pedigree,
                )
                bom.components.add(go_components[ref])
            uses.append(go_components[ref])
        bom.register_dependency(program, uses)
    bom.register_dependency(root, direct)
    return bom


def sbom_json(bom: Bom) -> str:
    return JsonV1Dot6(bom).output_as_string(indent=2)


def scan_image_layout(layers: Iterable[Path]) -> ImageContents:
    with tempfile.TemporaryDirectory(prefix="atomic-gang-sbom-") as scratch:
        return scan_layers(layers, Path(scratch))
