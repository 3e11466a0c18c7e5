"""The CRD chart (`charts/atomic-gang-provisioner-crd`) upgrades the GangNodePool CRD.

Helm installs a chart's `crds/` once and never upgrades them, and the apiserver prunes
status fields its schema does not know: a release adding one would lose it silently. The
CRD chart carries the CRD as a template, so `helm upgrade` applies the new schema. Against
the session's real apiserver (whose CRD the main chart's `crds/` would have installed): a
status field the schema lacks is pruned; the existing CRD is adopted by the CRD chart; an
upgrade to a chart version whose schema adds the field makes it stick; uninstalling keeps
the CRD (and so every pool).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from kubernetes import client as k8s  # type: ignore[import-untyped]

from provisioner.api import constants as c
from provisioner.api.gang_class import load_class_crd
from provisioner.api.gangnodepool import load_crd
from tests.support.pools import pool, pool_spec

REPO = Path(__file__).resolve().parents[2]
CRD_CHART = REPO / "charts" / "atomic-gang-provisioner-crd"
CRD_NAME = f"{c.GNP_PLURAL}.{c.GROUP}"
CLASS_CRD_NAME = f"{c.GANG_CLASS_PLURAL}.{c.GROUP}"
ADDED = "addedByAnUpgrade"

pytestmark = pytest.mark.integration


def test_the_crd_charts_crds_are_the_packages_byte_for_byte() -> None:
    for name in ("gangnodepool.yaml", "gangclass.yaml"):
        package = REPO / "provisioner" / "api" / "crds" / name
        assert (CRD_CHART / "files" / name).read_bytes() == package.read_bytes(), name


def _helm(helm: Path, kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(helm), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": str(kubeconfig.parent / "helm-cache")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _next_version(tmp: Path) -> Path:
    """The CRD chart as a later release would ship it: one more status field."""
    chart = tmp / "next"
    shutil.copytree(CRD_CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "99.0.0"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    crd = yaml.safe_load((chart / "files" / "gangnodepool.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status["properties"][ADDED] = {"type": "string"}
    (chart / "files" / "gangnodepool.yaml").write_text(yaml.safe_dump(crd))
    return chart


def _pool_with_status(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any]:
    custom.create_cluster_custom_object(
        c.GROUP,
        c.VERSION,
        c.GNP_PLURAL,
        pool(
            name,
            spec=pool_spec(
                pool=name,
                count=2,
                instance_type="m5.large",
                node_role_arn="arn:aws:iam::123456789012:role/node",
                ami_variant="standard",
            ),
        ),
    )
    return dict(
        custom.patch_cluster_custom_object_status(
            c.GROUP,
            c.VERSION,
            c.GNP_PLURAL,
            name,
            {"status": {"phase": "Idle", ADDED: "kept?"}},
        )
    )


def test_an_upgrade_that_adds_a_status_field_keeps_it(
    tools: Any, control_plane: Any, kube_api: Any, tmp_path: Path
) -> None:
    helm = tools["helm"].binary
    kubeconfig = control_plane.info.kubeconfig
    custom = k8s.CustomObjectsApi(kube_api)
    ext = k8s.ApiextensionsV1Api(kube_api)
    release, namespace = f"crd-{uuid.uuid4().hex[:6]}", "default"

    # Today's schema: the field is pruned.
    before = _pool_with_status(custom, f"crd-before-{uuid.uuid4().hex[:6]}")
    assert ADDED not in before["status"]

    # The CRDs the main chart's crds/ installed are adopted by the CRD chart's release.
    for name in (CRD_NAME, CLASS_CRD_NAME):
        ext.patch_custom_resource_definition(
            name,
            {
                "metadata": {
                    "labels": {"app.kubernetes.io/managed-by": "Helm"},
                    "annotations": {
                        "meta.helm.sh/release-name": release,
                        "meta.helm.sh/release-namespace": namespace,
                    },
                }
            },
        )
    try:
        _helm(helm, kubeconfig, "install", release, str(CRD_CHART), "--namespace", namespace)
        _helm(
            helm,
            kubeconfig,
            "upgrade",
            release,
            str(_next_version(tmp_path)),
            "--namespace",
            namespace,
            "--wait",
        )
        after = _pool_with_status(custom, f"crd-after-{uuid.uuid4().hex[:6]}")
        assert after["status"][ADDED] == "kept?"

        _helm(helm, kubeconfig, "uninstall", release, "--namespace", namespace)
        for name in (CRD_NAME, CLASS_CRD_NAME):  # kept by the keep policy
            assert ext.read_custom_resource_definition(name).metadata.name == name
    finally:
        # Back to the package's CRD for the rest of the session.
        for pool in custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL)["items"]:
            if pool["metadata"]["name"].startswith("crd-"):
                custom.delete_cluster_custom_object(
                    c.GROUP, c.VERSION, c.GNP_PLURAL, pool["metadata"]["name"]
                )
        control_plane.install_crds([load_crd(), load_class_crd()])
