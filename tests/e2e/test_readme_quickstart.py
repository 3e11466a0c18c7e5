"""The README's EKS quick start, run as written against the embedded default.

Every fenced shell block of the quick start carries a marker in the HTML comment before it:

- `<!-- quickstart:run -->`: run as written with bash (`set -euo pipefail`), in order, in a
  directory that holds the checkout's `charts/` and `.venv/`: `kubectl`, `helm` and
  `atomic-gang` against the embedded apiserver (its context's namespace is the one whose
  LocalQueue the environment made, as `default` is an install's), `aws` (the real AWS CLI,
  a pinned dev dependency) against the emulator, where the test first made `my-eks-cluster`
  as the EKS API makes a cluster (authentication mode CONFIG_MAP).
- `<!-- quickstart:server-dry-run: why -->`: a `helm install`/`upgrade` run as written
  plus `--dry-run=server --take-ownership`: helm renders the release with the apiserver's
  answers and checks its objects against the apiserver's schemas, and creates nothing. The
  embedded default runs the controller in this process, not the chart's Deployment, and
  made the settings ConfigMap and ServiceAccount itself from the same chart
  (`devenv/chart_install.py`), without helm's ownership annotations.
- `<!-- quickstart:needs-real-eks: why -->`: not run; the reason is printed.

A shell block of the quick start without a marker fails the test: a step that cannot run
here says so in the README, never silently. The Kueue values file the quick start writes is
checked against the configuration the embedded Kueue runs with (the frameworks and
waitForPodsReady), since its `helm install` needs a real cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from kubernetes import client as k8s

from devenv import device_plugins
from devenv.environment import LocalEnvironment
from devenv.kueue_manager import CONFIG_KEY, CONFIG_MAP, KUEUE_NAMESPACE
from provisioner.commands.doctor_daemonsets import tolerates_every_pool

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
SECTION = "## EKS quick start"
CLUSTER = "my-eks-cluster"
MARKED_BLOCK = re.compile(
    r"<!-- quickstart:(?P<kind>[\w-]+)(?::\s*(?P<why>.*?))?\s*-->\s*\n"
    r"```(?:sh|bash)\n(?P<text>.*?)\n```",
    re.S,
)
ANY_BLOCK = re.compile(r"^```(?:sh|bash)\n", re.M)
KINDS = ("run", "server-dry-run", "needs-real-eks")


@dataclass(frozen=True)
class Block:
    kind: str
    why: str
    text: str
    line: int

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.kind})"


def quickstart_blocks(readme: str) -> list[Block]:
    """The quick start's shell blocks, in order; fails on a block without a known marker."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start : end if end >= 0 else len(readme)]
    offset = readme[:start].count("\n") + 1
    blocks = [
        Block(m["kind"], m["why"] or "", m["text"], offset + section[: m.start("text")].count("\n"))
        for m in MARKED_BLOCK.finditer(section)
    ]
    unknown = [str(b) for b in blocks if b.kind not in KINDS]
    assert not unknown, f"markers other than {KINDS}: {unknown}"
    unmarked = len(ANY_BLOCK.findall(section)) - len(blocks)
    assert unmarked == 0, f"{unmarked} shell block(s) of the quick start carry no marker"
    assert all(b.why for b in blocks if b.kind != "run"), "a marker without its reason"
    return blocks


def test_the_quick_start_marks_every_block_and_runs_most() -> None:
    blocks = quickstart_blocks(README.read_text())
    assert [b for b in blocks if b.kind == "run"], "no block of the quick start is run"
    assert len(README.read_text().splitlines()) <= 700


def test_an_unmarked_block_is_refused() -> None:
    marked = f"{SECTION}\n\n<!-- quickstart:run -->\n```sh\nls\n```\n"
    (found,) = quickstart_blocks(marked + "\n## Next\n\n```sh\nnot in the section\n```\n")
    assert (found.kind, found.text, found.line) == ("run", "ls", 5)
    with pytest.raises(AssertionError, match="1 shell block"):
        quickstart_blocks(marked + "\n```sh\naws eks something-unmarked\n```\n")
    with pytest.raises(AssertionError, match="without its reason"):
        quickstart_blocks(marked.replace("quickstart:run", "quickstart:needs-real-eks"))


@pytest.fixture
def workdir(tmp_path: Path, tools: Any, namespace: str, env: LocalEnvironment) -> dict[str, Any]:
    """A checkout-like directory, and the environment every block runs with."""
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    for name in ("charts", ".venv"):
        (cwd / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("kubectl", "helm"):
        (bin_dir / tool).symlink_to(Path(tools[tool].binary))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(env.kubeconfig_path().read_text())
    environ = {
        **os.environ,
        "PATH": os.pathsep.join(
            [str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]
        ),
        "KUBECONFIG": str(kubeconfig),
        "AWS_ENDPOINT_URL": env.emulator.endpoint_url,  # type: ignore[union-attr]
        "AWS_PAGER": "",
    }
    subprocess.run(
        ["kubectl", "config", "set-context", "--current", f"--namespace={namespace}"],
        env=environ,
        check=True,
        capture_output=True,
    )
    return {"cwd": cwd, "env": environ}


@pytest.fixture
def env(gang_local: Callable[..., LocalEnvironment]) -> LocalEnvironment:
    """The embedded default with the device plugins as their upstream installs make them:
    without the gang toleration, which the quick start's step 4 adds."""
    plugins = tuple(p.name for p in device_plugins.MODELLED)
    started = gang_local(device_plugins_without_gang_toleration=plugins)
    assert started.emulator is not None
    # The user's cluster, made through the EKS API as `aws eks create-cluster` makes one.
    eks = boto3.client("eks", region_name="us-east-1", endpoint_url=started.emulator.endpoint_url)
    eks.create_cluster(
        name=CLUSTER,
        roleArn="arn:aws:iam::123456789012:role/eks-cluster-role",
        resourcesVpcConfig={"subnetIds": []},
    )
    return started


def run_block(block: Block, workdir: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    text = block.text
    if block.kind == "server-dry-run":
        assert re.match(r"^helm\s+(install|upgrade)\b", text), f"{block}: not a helm install"
        text += " --dry-run=server --take-ownership"
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=workdir["cwd"],
        env=workdir["env"],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )


def test_every_quick_start_command_runs_against_the_embedded_default(
    env: LocalEnvironment, workdir: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ran = []
    for block in quickstart_blocks(README.read_text()):
        if block.kind == "needs-real-eks":
            with capsys.disabled():
                print(f"\n{block}: not run here: {block.why}")
            continue
        done = run_block(block, workdir)
        assert done.returncode == 0, (
            f"{block} failed ({done.returncode}):\n{block.text}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
        ran.append((block, done))
    outputs = "\n".join(done.stdout for _, done in ran)

    # What the commands did, read back from the emulator and the apiserver.
    eks = boto3.client("eks", region_name="us-east-1", endpoint_url=env.emulator.endpoint_url)  # type: ignore[union-attr]
    addon = eks.describe_addon(clusterName=CLUSTER, addonName="eks-pod-identity-agent")["addon"]
    assert addon["status"] == "ACTIVE"
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    assert cluster["accessConfig"]["authenticationMode"] in ("API", "API_AND_CONFIG_MAP")
    (association,) = eks.list_pod_identity_associations(clusterName=CLUSTER)["associations"]
    assert (association["namespace"], association["serviceAccount"]) == (
        "atomic-gang-system",
        "atomic-gang-controller",
    )
    apps = k8s.AppsV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    for plugin in device_plugins.MODELLED:
        ds = apps.read_namespaced_daemon_set(plugin.name, plugin.namespace).to_dict()
        tolerations = [
            {"key": t["key"], "operator": t["operator"], "effect": t["effect"]}
            for t in ds["spec"]["template"]["spec"]["tolerations"]
        ]
        assert tolerates_every_pool(tolerations), f"{plugin.name} still lacks the toleration"
    assert "passed, 0 warned, 0 failed" in outputs, "doctor did not pass every line"
    assert "hello-gang" in outputs and "condition met" in outputs

    # The Kueue the quick start installs is configured as the embedded one runs.
    values = yaml.safe_load((workdir["cwd"] / "kueue-values.yaml").read_text())
    written = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    core = k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    running = yaml.safe_load(
        core.read_namespaced_config_map(CONFIG_MAP, KUEUE_NAMESPACE).data[CONFIG_KEY]
    )
    assert written["apiVersion"] == running["apiVersion"]
    assert sorted(written["integrations"]["frameworks"]) == sorted(
        running["integrations"]["frameworks"]
    )
    assert written["waitForPodsReady"] == running["waitForPodsReady"]
