"""The Kubernetes provider of Pulumi: built on request from the commit of its release, its
embedded schema generated first, with the SDK sibling and the Pulumi modules upstream names."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.toolchain import installer as tools
from provisioner.toolchain.versions import ALL_TOOLS, PULUMI, PULUMI_KUBERNETES, TOOLS_BY_NAME

# The provider module's go.mod at the v4.25.0 commit, cut to what the wrapper reads.
PROVIDER_GO_MOD = """module github.com/pulumi/pulumi-kubernetes/provider/v4

go 1.24.7

replace github.com/pulumi/pulumi-kubernetes/sdk/v4 => ../sdk

require (
\tgithub.com/pulumi/pulumi-kubernetes/sdk/v4 v4.24.0
\tgithub.com/pulumi/pulumi/pkg/v3 v3.215.0
\tgithub.com/pulumi/pulumi/sdk/v3 v3.215.0
)
"""


def test_the_provider_is_built_on_request_only() -> None:
    assert TOOLS_BY_NAME["pulumi-kubernetes"] is PULUMI_KUBERNETES
    assert PULUMI_KUBERNETES not in ALL_TOOLS
    assert not PULUMI_KUBERNETES.reuse_from_path


def test_the_wrapper_builds_the_release_commit_from_the_generated_copy() -> None:
    text = tools.wrapper_go_mod(PULUMI_KUBERNETES, PROVIDER_GO_MOD)
    # The proxy serves the provider at a pseudo-version of the release's commit.
    assert f"\t{PULUMI_KUBERNETES.module} {PULUMI_KUBERNETES.module_version}" in text
    assert tools.module_version(PULUMI_KUBERNETES) == PULUMI_KUBERNETES.module_version
    assert f"\t{PULUMI_KUBERNETES.module} => {tools.GENERATED_SOURCE}" in text
    # The SDK sibling upstream takes from ../sdk is its published release of the same version.
    sdk = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
    assert f"\t{sdk} => {sdk} v4.25.0" in text
    # The Pulumi modules are the provider's own (v3.215.0): the CLI's release is not forced
    # on it (it does not compile with v3.260.0).
    assert PULUMI.version not in text


def test_the_cache_is_keyed_by_the_release_and_the_version_stamped() -> None:
    assert tools.tool_dir(PULUMI_KUBERNETES).name == "pulumi-kubernetes-v4.25.0"
    (flag,) = PULUMI_KUBERNETES.ldflags
    assert flag.endswith("/pkg/version.Version=4.25.0")
    assert PULUMI_KUBERNETES.generate == ("cmd/pulumi-resource-kubernetes",)


def test_a_tool_without_generated_files_is_built_from_the_module_itself() -> None:
    text = tools.wrapper_go_mod(PULUMI, "replace github.com/pulumi/pulumi/sdk/v3 => ../sdk\n")
    assert tools.GENERATED_SOURCE not in text
    assert f"\t{PULUMI.module} {PULUMI.version}" in text


def test_a_missing_build_names_the_command_that_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH reports a version either
    # `make tools` does not build the provider (make test's late-builds does): not named.
    with pytest.raises(tools.ToolError) as provider:
        tools.resolve(PULUMI_KUBERNETES, build=False)
    assert str(provider.value) == (
        "pulumi-kubernetes v4.25.0 is not installed. "
        "Run `atomic-gang tools --only pulumi-kubernetes` to build it."
    )
    with pytest.raises(tools.ToolError, match=r"Run `make tools` \(or `atomic-gang tools"):
        tools.resolve(PULUMI, build=False)
