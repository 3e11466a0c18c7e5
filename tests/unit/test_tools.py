"""The tool installer's pure parts: replace-directive translation and cache lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.toolchain import installer as tools
from provisioner.toolchain.versions import (
    ALL_TOOLS,
    ETCD,
    JOBSET,
    KUBE_APISERVER,
    KUEUE,
    PULUMI,
    TRAINER,
    TRAINING_TOOLS,
)

KUBE_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/spf13/cobra v1.10.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
)
"""

ETCD_GO_MOD = """module go.etcd.io/etcd/server/v3

replace (
\tgo.etcd.io/etcd/api/v3 => ../api
\tgo.etcd.io/etcd/pkg/v3 => ../pkg
)

// Bad imports are sometimes causing attempts to pull that code.
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""

PULUMI_GO_MOD = """module github.com/pulumi/pulumi/pkg/v3

replace github.com/pulumi/pulumi/sdk/v3 => ../sdk

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
"""


def test_relative_replacements_become_published_sibling_releases() -> None:
    text = tools.wrapper_go_mod(KUBE_APISERVER, KUBE_GO_MOD)
    assert "\tk8s.io/api => k8s.io/api v0.36.3" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.36.3" in text
    assert "\tk8s.io/kubernetes v1.36.3" in text


def test_forbidden_guards_are_dropped_and_siblings_kept_at_the_release() -> None:
    text = tools.wrapper_go_mod(ETCD, ETCD_GO_MOD)
    assert "FORBIDDEN" not in text
    assert "go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16" in text
    assert "go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v3.6.16" in text


def test_versioned_replacements_are_copied_and_sdk_is_pinned_with_the_cli() -> None:
    text = tools.wrapper_go_mod(PULUMI, PULUMI_GO_MOD)
    assert (
        "github.com/atotto/clipboard => github.com/tgummerer/clipboard "
        "v0.0.0-20241001131231-d02d263e614e"
    ) in text
    assert "\tgithub.com/pulumi/pulumi/sdk/v3 v3.260.0" in text
    assert "github.com/pulumi/pulumi/sdk/v3 => github.com/pulumi/pulumi/sdk/v3 v3.260.0" in text


def test_single_line_and_block_replacements_are_both_read() -> None:
    found = tools.upstream_replacements(ETCD_GO_MOD)
    assert ("go.etcd.io/etcd", "./FORBIDDEN_DEPENDENCY", None) in found
    assert ("go.etcd.io/etcd/api/v3", "../api", None) in found


def test_pulumi_cli_and_python_sdk_are_one_release() -> None:
    import importlib.metadata

    assert PULUMI.version == "v" + importlib.metadata.version("pulumi")


def test_every_tool_is_pinned_to_an_exact_version() -> None:
    for tool in ALL_TOOLS:
        assert tool.version.startswith("v") and tool.version.count(".") == 2, tool


def test_cache_is_outside_the_checkout_and_honours_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATOMIC_GANG_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tools.tool_dir(ETCD) == tmp_path / "xdg" / "atomic-gang" / "tools" / "etcd-v3.6.16"
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path / "explicit"))
    assert tools.cache_root() == tmp_path / "explicit"


def test_a_cached_build_is_found_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path))
    home = tools.tool_dir(KUEUE)
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / KUEUE.binary
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (home / ".built").write_text(KUEUE.version + "\n")
    found = tools.resolve(KUEUE, build=False)
    assert found.source == "cache" and found.binary == binary


def test_a_missing_tool_without_building_names_the_retry_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(tools.ToolError, match="atomic-gang tools --only kueue"):
        tools.resolve(KUEUE, build=False)


def test_a_binary_on_path_with_the_wrong_version_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "etcd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.5.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(tools.ToolError):
        tools.resolve(ETCD, build=False)
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.6.16'\n")
    assert tools.resolve(ETCD, build=False).source == "path"


def test_helm_is_stamped_with_a_kube_version_and_keyed_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from provisioner.toolchain.versions import HELM

    # `helm template` and `helm lint` default to these instead of v1.20.0.
    for package in ("helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"):
        assert f"-X {package}.k8sVersionMajor=1" in HELM.ldflags
        assert f"-X {package}.k8sVersionMinor=37" in HELM.ldflags
    monkeypatch.setenv("ATOMIC_GANG_CACHE", str(tmp_path))
    # An unstamped build of the same release in the cache is never taken for this one.
    assert tools.tool_dir(HELM).name == f"helm-{HELM.version}+kube1.37"


# Trainer v2.0.0's go.mod, cut down: no replace directives, JobSet's Go API as a dependency.
TRAINER_GO_MOD = """module github.com/kubeflow/trainer/v2

go 1.24.0

require (
\tk8s.io/api v0.32.2
\tsigs.k8s.io/jobset v0.8.2
)
"""


def test_training_controllers_are_in_the_default_set_at_the_versions_kueue_pins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`make tools` builds them: the embedded default installs their CRDs before Kueue, and
    the gang-kind e2e tests run them. Their versions are the ones Kueue 0.19.2's go.mod
    requires, so Kueue's integrations and the installed CRDs are one API."""
    assert {t.name for t in TRAINING_TOOLS} <= {t.name for t in ALL_TOOLS}
    assert {t.name: t.version for t in TRAINING_TOOLS} == {
        "jobset": "v0.12.0",
        "training-operator": "v1.9.3",
        "trainer": "v2.2.1",
        "mpi-operator": "v0.8.2",
    }
    for tool in TRAINING_TOOLS:
        # CRDs and webhook manifests come from the same build, like Kueue's.
        assert tool.assets and not tool.reuse_from_path, tool
    asked: list[str] = []

    def fake_resolve(tool: object, *, build: bool = True) -> tools.ResolvedTool:
        asked.append(tool.name)  # type: ignore[attr-defined]
        return tools.ResolvedTool(tool, Path("/bin/true"), None, "path")  # type: ignore[arg-type]

    monkeypatch.setattr(tools, "resolve", fake_resolve)
    tools.ensure_all()
    assert asked == [tool.name for tool in ALL_TOOLS]
    assert asked[-4:] == ["jobset", "training-operator", "trainer", "mpi-operator"]
    asked.clear()
    tools.ensure_all(["trainer"])
    assert asked == ["trainer"]


def test_a_module_without_replacements_gets_a_wrapper_without_a_replace_block() -> None:
    text = tools.wrapper_go_mod(TRAINER, TRAINER_GO_MOD)
    assert f"\tgithub.com/kubeflow/trainer/v2 {TRAINER.version}" in text
    assert "replace" not in text
    # The JobSet release the Trainer build takes comes from Trainer's own go.mod (via
    # `go mod tidy`), not from the JobSet controller pinned beside it.
    assert JOBSET.module not in text


# The two files of zxcvbn-go 1.0.1 the Pulumi patch edits, cut to the parts it touches.
ZXCVBN_FREQUENCY = """package frequency

import (
\t"encoding/json"
\t"log"
)

var Lists = make(map[string]List)

func init() {
\tLists["English"] = getStringListFromAsset(englishFilePath, "English")
}
"""

ZXCVBN_MATCHING = """package matching

import (
\t"sort"
)

func init() {
\tloadFrequencyList()
}

func Omnimatch(password string, userInputs []string) (matches []match.Match) {
\t// Can I run into the issue where nil is not equal to nil?
\tif dictionaryMatchers == nil || adjacencyGraphs == nil {
\t\tloadFrequencyList()
\t}
\treturn matches
}

func loadFrequencyList() {
\tfor n, list := range frequency.Lists {
\t}
}
"""


def _zxcvbn(root: Path, matching: str = ZXCVBN_MATCHING) -> Path:
    (root / "frequency").mkdir(parents=True)
    (root / "matching").mkdir()
    (root / "frequency" / "frequency.go").write_text(ZXCVBN_FREQUENCY)
    (root / "matching" / "matching.go").write_text(matching)
    return root


def test_pulumi_is_built_with_zxcvbns_word_lists_loaded_on_first_use(tmp_path: Path) -> None:
    from provisioner.toolchain.patches import LAZY_WORD_LISTS, lazy_word_lists

    assert {p.module for p in PULUMI.patches} == {p.module for p in LAZY_WORD_LISTS}
    # A cached build from before the patch is never taken for this one.
    assert tools.tool_dir(PULUMI).name == f"pulumi-{PULUMI.version}+lazy-wordlists"
    root = _zxcvbn(tmp_path)

    lazy_word_lists(root)

    frequency = (root / "frequency" / "frequency.go").read_text()
    matching = (root / "matching" / "matching.go").read_text()
    assert "func init()" not in frequency and "func init()" not in matching
    assert "func Load() { loadOnce.Do(load) }" in frequency
    assert "\tloadOnce.Do(loadFrequencyList)\n\treturn matches" in matching
    assert "func loadFrequencyList() {\n\tfrequency.Load()\n" in matching
    assert matching.count('"sync"') == 1 and frequency.count('"sync"') == 1


def test_a_patch_whose_upstream_text_changed_fails_loudly(tmp_path: Path) -> None:
    from provisioner.toolchain.patches import PatchError, lazy_word_lists

    root = _zxcvbn(tmp_path, ZXCVBN_MATCHING.replace("func init() {", "func setup() {"))

    with pytest.raises(PatchError, match="the text this patch edits is gone"):
        lazy_word_lists(root)


_MPI_SERVER_GO = """package app

import (
\t"fmt"
\t"os"
)

const (
\thealthCheckPort = 8080
)

func Run() {
\tserver := &http.Server{
\t\tAddr:    fmt.Sprintf(":%d", healthCheckPort),
\t\tHandler: mux,
\t}
}
"""


def test_mpi_operators_health_address_comes_from_the_environment(tmp_path: Path) -> None:
    """Upstream binds :8080, so two local environments on one machine would collide."""
    from provisioner.toolchain.patches import HEALTH_ADDRESS, health_address
    from provisioner.toolchain.versions import MPI_OPERATOR

    server = tmp_path / "cmd" / "mpi-operator" / "app" / "server.go"
    server.parent.mkdir(parents=True)
    server.write_text(_MPI_SERVER_GO)
    health_address(tmp_path)
    patched = server.read_text()
    assert "Addr:    healthCheckAddress()," in patched
    assert 'os.Getenv("MPI_OPERATOR_HEALTH_ADDRESS")' in patched
    assert 'return fmt.Sprintf(":%d", healthCheckPort)' in patched  # upstream's port otherwise
    assert MPI_OPERATOR.patches == HEALTH_ADDRESS and MPI_OPERATOR.build_tag
    assert HEALTH_ADDRESS[0].module == MPI_OPERATOR.module


def test_the_health_address_patch_fails_loudly_when_upstream_changed(tmp_path: Path) -> None:
    from provisioner.toolchain.patches import PatchError, health_address

    server = tmp_path / "cmd" / "mpi-operator" / "app" / "server.go"
    server.parent.mkdir(parents=True)
    server.write_text(_MPI_SERVER_GO.replace('":%d", healthCheckPort', '":%d", port'))
    with pytest.raises(PatchError, match="the text this patch edits is gone"):
        health_address(tmp_path)
