"""Every `helm install`, `helm upgrade` and `helm template` command of this project's charts
that the READMEs show renders with the pinned helm, as written: a reader who copies one gets
a chart that installs, not a render error naming a value the README forgot.

The commands are read from the fenced shell blocks of README.md, of each chart's README and
of docs/UPGRADING.md (continuation lines joined). `helm install` and `helm upgrade
[--install]` become `helm template` with the same arguments (helm validates values and
renders templates the same way for all three; only template runs without a cluster),
`--kube-version` is added when absent (helm assumes an older Kubernetes than the chart
requires when it has no cluster to ask), and an `oci://` reference to this chart is rendered
from the chart's directory.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chart.conftest import KUBE_VERSION, Helm

ROOT = Path(__file__).resolve().parents[2]
READMES = [
    ROOT / "README.md",
    *sorted((ROOT / "charts").glob("*/README.md")),
    ROOT / "docs" / "UPGRADING.md",
    ROOT / "docs" / "RELEASE.md",
]
# Flags only `helm upgrade` knows; they change nothing a render shows.
_UPGRADE_ONLY = {"--install", "--reuse-values", "--reset-values", "--reset-then-reuse-values"}
_UPGRADE_ONLY_WITH_VALUE = {"--history-max"}
_FENCE = re.compile(r"^```(\w*)\s*$")
# This project's charts, by path or OCI reference; the quick start also installs Kueue's
# chart, which its own test accounts for (tests/e2e/test_readme_quickstart.py).
_OUR_CHART = re.compile(r"(charts/|oci://\S+/)atomic-gang-provisioner")


@dataclass(frozen=True)
class ReadmeCommand:
    source: str  # file:line, for the failure message
    text: str

    def __str__(self) -> str:
        return self.source


def readme_helm_commands(path: Path, root: Path = ROOT) -> list[ReadmeCommand]:
    """The helm install/upgrade/template commands of `path`'s shell code blocks."""
    commands: list[ReadmeCommand] = []
    in_block = in_shell = False
    pending: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fence = _FENCE.match(line.strip())
        if fence:
            opening = not in_block
            in_block = opening
            in_shell = opening and fence.group(1) in ("", "sh", "bash", "shell", "console")
            pending = []
            continue
        if not in_shell:
            continue
        stripped = line.strip().removeprefix("$ ")
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if stripped.endswith("\\"):
            continue
        text = " ".join(pending).split(" #", 1)[0].strip()
        pending = []
        if re.match(r"^helm\s+(install|upgrade|template)\b", text) and _OUR_CHART.search(text):
            commands.append(ReadmeCommand(f"{path.relative_to(root)}:{start}", text))
    return commands


def as_template(command: ReadmeCommand) -> list[str]:
    """The command's arguments for `helm template` (without the binary)."""
    words = shlex.split(command.text)
    assert words[0] == "helm"
    rest = words[2:]  # install, upgrade and template take the same release and chart
    args: list[str] = ["template"]
    skip_next = False
    for word in rest:
        if skip_next:
            skip_next = False
            continue
        if word in _UPGRADE_ONLY:
            continue
        if word in _UPGRADE_ONLY_WITH_VALUE:
            skip_next = True
            continue
        if word.startswith("oci://") and word.rstrip("/").endswith("/atomic-gang-provisioner"):
            word = str(ROOT / "charts" / "atomic-gang-provisioner")
        args.append(word)
    if not any(a == "--kube-version" or a.startswith("--kube-version=") for a in args):
        args += ["--kube-version", KUBE_VERSION]
    return args


COMMANDS = [c for readme in READMES for c in readme_helm_commands(readme)]


def test_the_readmes_show_an_install_command() -> None:
    assert any(re.match(r"^helm\s+(install|upgrade)\b", c.text) for c in COMMANDS), [
        str(p) for p in READMES
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_readme_command_renders(helm: Helm, command: ReadmeCommand) -> None:
    args = as_template(command)
    for i, word in enumerate(args):
        if word in ("-f", "--values"):
            assert (ROOT / args[i + 1]).is_file(), f"{command}: values file {args[i + 1]} missing"
    done = helm_in_root(helm, args)
    assert done.returncode == 0, f"{command}: `{command.text}` fails:\n{done.stderr}"
    # The CRD chart renders the CRD alone; the main chart, the controller.
    made = "CustomResourceDefinition" if "provisioner-crd" in command.text else "Deployment"
    assert f"kind: {made}" in done.stdout, f"{command}: rendered no {made}"


def helm_in_root(helm: Helm, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm.binary), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_the_extractor_reads_continued_lines_and_only_shell_blocks(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "text helm install x y\n"
        "```yaml\nhelm install not-a-command ./chart\n```\n"
        "```sh\n"
        "helm upgrade --install atomic-gang ./charts/atomic-gang-provisioner \\\n"
        "  --namespace ns --create-namespace \\\n"
        "  --set-string clusterName=c  # the cluster\n"
        "kubectl get pods\n"
        "helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version 0.19.2\n"
        "```\n"
    )
    (found,) = readme_helm_commands(readme, root=tmp_path)
    assert found.source == "README.md:6"
    assert as_template(found) == [
        "template",
        "atomic-gang",
        "./charts/atomic-gang-provisioner",
        "--namespace",
        "ns",
        "--create-namespace",
        "--set-string",
        "clusterName=c",
        "--kube-version",
        KUBE_VERSION,
    ]
