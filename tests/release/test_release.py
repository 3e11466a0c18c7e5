"""The release a platform team installs from, served by a real OCI registry.

`make release` makes a chart package and an image archive at pyproject's version, with OCI
labels and a CycloneDX SBOM of what the image holds. The image archive is loaded, pushed to
the local Distribution registry and pulled back by the digest the push reported: the pulled
image is the archive's (same config digest, same labels). The chart is pushed with
`helm push` and installed with `helm install oci://…` on the embedded apiserver (a real
install, not a dry run: its objects are created, then uninstalled), the Deployment pointing
at the pushed image's tag, which the registry resolves to the pushed digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from kubernetes import client as k8s  # type: ignore[import-untyped]

from release.build import IMAGE_NAME, Release
from tests.chart.conftest import REQUIRED
from tests.release.conftest import REPO, Registry, podman

# The first test's setup may build the image (minutes on vfs) and the registry (Go).
pytestmark = pytest.mark.timeout(3600)

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def _archive_json(archive: Path, name: str) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return json.loads(member.read())  # type: ignore[no-any-return]


def _archive_config(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    index = _archive_json(archive, "index.json")
    (descriptor,) = index["manifests"]
    manifest = _archive_json(archive, f"blobs/sha256/{descriptor['digest'][7:]}")
    config = _archive_json(archive, f"blobs/sha256/{manifest['config']['digest'][7:]}")
    return descriptor, config


def test_the_chart_and_the_image_are_one_version_with_oci_labels(release: Release) -> None:
    version = _pyproject()["version"]
    assert release.chart.name == f"{IMAGE_NAME}-{version}.tgz"
    with tarfile.open(release.chart) as tar:
        member = tar.extractfile(f"{IMAGE_NAME}/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
        names = tar.getnames()
    assert (chart["version"], chart["appVersion"]) == (version, version)
    assert f"{IMAGE_NAME}/values.schema.json" in names or f"{IMAGE_NAME}/values.yaml" in names

    descriptor, config = _archive_config(release.archive)
    assert descriptor["digest"] == release.manifest_digest
    ref_name = descriptor["annotations"]["org.opencontainers.image.ref.name"]
    assert ref_name == f"{IMAGE_NAME}:{version}"
    labels = config["config"]["Labels"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == _pyproject()["license"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"].startswith(head)
    assert labels["org.opencontainers.image.title"] == IMAGE_NAME
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["org.opencontainers.image.created"]
    )
    # The product image, not just any image: what image/build.sh labelled it with is kept.
    assert labels["io.atomic-gang.inputs"]
    assert config["config"]["Entrypoint"] == ["atomic-gang"]


def test_the_sbom_lists_the_images_python_packages_and_its_go_binarys_modules(
    release: Release, tools: Any
) -> None:
    text = release.sbom.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    root = document["metadata"]["component"]
    assert root["type"] == "container"
    assert root["version"] == _pyproject()["version"]
    assert release.manifest_digest in root["purl"]
    purls = {c["purl"] for c in document["components"] if "purl" in c}

    # Every runtime pin of pyproject is in the image at exactly that version, and the product
    # itself; the dev extras (pytest) are not: the SBOM reads the image, not this venv.
    for pin in _pyproject()["dependencies"]:
        name, version = pin.split("==")
        assert f"pkg:pypi/{name.lower()}@{version}" in purls, pin
    assert f"pkg:pypi/atomic-gang-provisioner@{_pyproject()['version']}" in purls
    assert not any(p.startswith("pkg:pypi/pytest@") for p in purls)

    # The image's Go binary is the Pulumi CLI the toolchain built (same bytes), and its
    # modules are what `go version -m` reads from that binary.
    (program,) = [c for c in document["components"] if c["type"] == "application"]
    assert program["name"] == "pulumi"
    cli = tools["pulumi"].binary
    assert program["hashes"][0]["content"] == hashlib.sha256(cli.read_bytes()).hexdigest()
    info = json.loads(
        subprocess.run(
            ["go", "version", "-m", "-json", str(cli)], capture_output=True, text=True, check=True
        ).stdout
    )
    expected = {info["Main"]["Path"]} | {
        (d.get("Replace") or d)["Path"]
        if (d.get("Replace") or {}).get("Version", "(devel)") != "(devel)"
        else d["Path"]
        for d in info["Deps"]
    }
    go_names = {
        c["name"] for c in document["components"] if c.get("purl", "").startswith("pkg:golang/")
    }
    assert go_names == expected
    depends = {d["ref"]: set(d.get("dependsOn", [])) for d in document["dependencies"]}
    assert len(depends[program["bom-ref"]]) == len(expected)
    assert program["bom-ref"] in depends[root["bom-ref"]]


@pytest.fixture(scope="module")
def pushed_image(
    release: Release, registry: Registry, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The archive loaded and pushed to the registry; the digest the push reported."""
    loaded = podman("load", "--input", str(release.archive))
    assert f"localhost/{IMAGE_NAME}:{release.version}" in loaded, loaded
    config_id = release.config_digest.removeprefix("sha256:")
    (inspected,) = json.loads(
        podman("image", "inspect", f"localhost/{IMAGE_NAME}:{release.version}")
    )
    assert inspected["Id"] == config_id
    digest_file = tmp_path_factory.mktemp("push") / "digest"
    target = f"{registry.address}/{IMAGE_NAME}:{release.version}"
    podman("push", "--tls-verify=false", "--digestfile", str(digest_file), config_id, target)
    # The loaded copy goes, so the pull below must come from the registry (the layers are
    # shared with the dev image and stay in local storage; the config and manifest do not).
    podman("rmi", "--force", config_id)
    return digest_file.read_text().strip()


def test_the_image_is_pushed_and_pulled_back_by_digest(
    release: Release, registry: Registry, pushed_image: str
) -> None:
    reference = f"{registry.address}/{IMAGE_NAME}@{pushed_image}"
    status, headers, body = registry.get(
        f"/v2/{IMAGE_NAME}/manifests/{pushed_image}", MANIFEST_TYPES
    )
    assert status == 200 and headers["Docker-Content-Digest"] == pushed_image
    assert "sha256:" + hashlib.sha256(body).hexdigest() == pushed_image
    assert json.loads(body)["config"]["digest"] == release.config_digest

    podman("pull", "--tls-verify=false", reference)
    try:
        (inspected,) = json.loads(podman("image", "inspect", reference))
        assert inspected["Id"] == release.config_digest.removeprefix("sha256:")
        assert inspected["Digest"] == pushed_image
        assert release.labels.items() <= inspected["Labels"].items()
        assert inspected["Labels"]["org.opencontainers.image.version"] == release.version
    finally:
        podman("rmi", "--force", reference)


def _helm(helm: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # Helm's registry login, cache and repositories live in the test's directory.
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=300, check=False, env=env
    )


def test_the_chart_is_pushed_and_installed_from_the_registry(
    release: Release,
    registry: Registry,
    pushed_image: str,
    tools: Any,
    control_plane: Any,
    kube_api: Any,
    kueue_crds: list[str],
    namespace: str,
    tmp_path: Path,
) -> None:
    helm = tools["helm"].binary
    pushed = _helm(
        helm,
        tmp_path,
        "push",
        str(release.chart),
        f"oci://{registry.address}/charts",
        "--plain-http",
    )
    assert pushed.returncode == 0, pushed.stderr
    chart_digest = re.search(r"Digest: (sha256:[0-9a-f]{64})", pushed.stdout + pushed.stderr)
    assert chart_digest, pushed.stdout + pushed.stderr
    _, headers, _ = registry.get(
        f"/v2/charts/{IMAGE_NAME}/manifests/{release.version}",
        "application/vnd.oci.image.manifest.v1+json",
    )
    assert headers["Docker-Content-Digest"] == chart_digest[1]

    # Cluster-scoped names are the test's own: the shared control plane has other suites'.
    suffix = uuid.uuid4().hex[:6]
    values = {
        **REQUIRED,
        "image.repository": f"{registry.address}/{IMAGE_NAME}",
        "fullnameOverride": f"atomic-gang-{suffix}",
        "kueue.admissionCheckName": f"atomic-gang-check-{suffix}",
        "kueue.resourceFlavorName": f"atomic-gang-flavor-{suffix}",
        "kueue.clusterQueueName": f"atomic-gang-cq-{suffix}",
        "kueue.localQueueNamespaces[0]": namespace,
        # No pod runs here to answer a fail-closed webhook; other suites' Jobs would be refused.
        "webhook.enabled": "false",
    }
    release_name = f"ag-{suffix}"
    install = [
        "install", release_name, f"oci://{registry.address}/charts/{IMAGE_NAME}",
        "--version", release.version, "--plain-http",
        "--namespace", namespace, "--kubeconfig", str(control_plane.info.kubeconfig),
    ]  # fmt: skip
    for key, value in values.items():
        install += ["--set" if value == "false" else "--set-string", f"{key}={value}"]
    installed = _helm(helm, tmp_path, *install)
    try:
        assert installed.returncode == 0, installed.stderr
        listed = _helm(
            helm, tmp_path, "list", "--namespace", namespace, "--output", "json",
            "--kubeconfig", str(control_plane.info.kubeconfig),
        )  # fmt: skip
        (entry,) = json.loads(listed.stdout)
        assert entry["chart"] == f"{IMAGE_NAME}-{release.version}"
        assert (entry["app_version"], entry["status"]) == (release.version, "deployed")

        deployment = k8s.AppsV1Api(kube_api).read_namespaced_deployment(
            f"atomic-gang-{suffix}", namespace
        )
        (container,) = deployment.spec.template.spec.containers
        assert container.image == f"{registry.address}/{IMAGE_NAME}:{release.version}"
        # The tag the chart installs is the image pushed above.
        _, headers, _ = registry.get(
            f"/v2/{IMAGE_NAME}/manifests/{release.version}", MANIFEST_TYPES
        )
        assert headers["Docker-Content-Digest"] == pushed_image
        queue = k8s.CustomObjectsApi(kube_api).get_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", "atomic-gang-queue"
        )
        assert queue["spec"]["clusterQueue"] == f"atomic-gang-cq-{suffix}"
    finally:
        _helm(
            helm, tmp_path, "uninstall", release_name, "--namespace", namespace, "--wait",
            "--kubeconfig", str(control_plane.info.kubeconfig),
        )  # fmt: skip
