"""The project the bootstrap's Kubernetes half runs as: the repository's own, with the
provider's build as its only Kubernetes plugin."""

from __future__ import annotations

from pathlib import Path

import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

from devenv.bootstrap_kubernetes import FORCED, PROJECT_FILE, project_settings


def test_the_project_is_the_repositorys_with_the_provider_build_as_its_plugin() -> None:
    repository = yaml.safe_load(PROJECT_FILE.read_text())
    project = project_settings(Path("/cache/tools/pulumi-kubernetes-v4.25.0/bin"))
    assert project["name"] == repository["name"]
    assert project["config"] == repository["config"]
    assert project["plugins"] == {
        "providers": [{"name": "kubernetes", "path": "/cache/tools/pulumi-kubernetes-v4.25.0/bin"}]
    }


def test_the_runner_never_makes_aws_resources() -> None:
    assert FORCED == {"createAwsResources": False}
