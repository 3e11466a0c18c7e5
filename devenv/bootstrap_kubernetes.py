"""`pulumi up` and `pulumi destroy` of the bootstrap's Kubernetes half (`infra/` with
`createAwsResources=false`: the Kueue objects and the Helm release) through the real Pulumi
CLI and the real Kubernetes provider, against the cluster a kubeconfig names.

Called by `tests/e2e/test_bootstrap_kubernetes.py` in a child process (so the Pulumi
runtime's process-wide state never lives in a test worker), and by hand against the
embedded default:

    .venv/bin/python -m devenv.bootstrap_kubernetes up --work-dir /tmp/boot \\
        --kubeconfig .devenv/control-plane/kubeconfig \\
        --config '{"clusterName": "demo", "region": "us-east-1", "cpuQuota": "8", ...}'
    .venv/bin/python -m devenv.bootstrap_kubernetes destroy --work-dir /tmp/boot ...

Both tools come from the toolchain's cache: the CLI (`make tools`) and
`pulumi-resource-kubernetes` (`make test` builds it beside its slow suites, or
`atomic-gang tools --only pulumi-kubernetes`), built from Go modules. The pulumi-aws
provider is not served by the Go module proxy, so the AWS half cannot run here; it is
tested under Pulumi's mocks.

The program is `infra.program.main`, run inline by the Automation API: the CLI built here
has no Python language host (its Go module is not served either), and inline, the program
runs in this process's interpreter, the venv's. The project file in the work directory is
the repository's `Pulumi.yaml` (its name and config declarations) plus a `plugins:
providers:` entry naming the provider's directory, which the engine takes whatever version
the pulumi_kubernetes SDK asks for; ambient plugins and plugin downloads are switched off,
so nothing else can stand in for it. State: a file backend in the work directory, with
passphrase secrets (it holds none).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from pulumi import automation as auto

REPO = Path(__file__).resolve().parent.parent
PROJECT_FILE = REPO / "Pulumi.yaml"
DEFAULT_STACK = "kubernetes-half"
# What the runner always sets: it has no AWS provider, and a cluster without nodes (the
# embedded default) never makes the controller's Deployment Ready. `config` may say
# waitForController=true for a cluster that can.
FORCED = {"createAwsResources": False}
DEFAULTS = {"waitForController": False}


@dataclass(frozen=True)
class Binaries:
    pulumi: Path  # the CLI
    provider: Path  # pulumi-resource-kubernetes

    @classmethod
    def from_cache(cls) -> Binaries:
        """The toolchain's builds; missing ones are named with the command that builds them."""
        from provisioner.toolchain import installer
        from provisioner.toolchain.versions import PULUMI, PULUMI_KUBERNETES

        return cls(
            installer.resolve(PULUMI, build=False).binary,
            installer.resolve(PULUMI_KUBERNETES, build=False).binary,
        )


def project_settings(provider_dir: Path) -> dict[str, Any]:
    """The repository's project file, with the provider's build as a project plugin."""
    project = yaml.safe_load(PROJECT_FILE.read_text())
    return {
        "name": project["name"],
        "description": project["description"],
        "runtime": "python",
        "config": project["config"],
        "plugins": {"providers": [{"name": "kubernetes", "path": str(provider_dir)}]},
    }


def _env(work_dir: Path) -> dict[str, str]:
    helm = work_dir / "helm"
    return {
        "PULUMI_BACKEND_URL": f"file://{work_dir / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", "bootstrap"),
        "PULUMI_HOME": str(work_dir / "pulumi-home"),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # The provider's Helm keeps its caches here, not in the user's home.
        "HELM_CACHE_HOME": str(helm / "cache"),
        "HELM_CONFIG_HOME": str(helm / "config"),
        "HELM_DATA_HOME": str(helm / "data"),
    }


def _program() -> None:
    from infra.program import main

    main()


def open_stack(
    work_dir: Path,
    kubeconfig: Path,
    config: dict[str, Any],
    binaries: Binaries,
    stack_name: str = DEFAULT_STACK,
) -> auto.Stack:
    """Select (or create) the stack in `work_dir` and write its configuration: `config` is
    the bootstrap's keys without the project prefix, values as YAML would hold them."""
    project = project_settings(binaries.provider.parent)
    (work_dir / "state").mkdir(parents=True, exist_ok=True)
    (work_dir / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    stack = auto.create_or_select_stack(
        stack_name=stack_name,
        project_name=project["name"],
        program=_program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            env_vars=_env(work_dir),
            secrets_provider="passphrase",
            pulumi_command=auto.PulumiCommand(root=str(binaries.pulumi.parent.parent)),
        ),
    )
    # Written after the stack exists, beside the encryption salt its creation wrote: the
    # Automation API's own config setter takes strings only, and some keys are lists or
    # objects.
    stack_file = work_dir / f"Pulumi.{stack_name}.yaml"
    settings = yaml.safe_load(stack_file.read_text()) if stack_file.is_file() else {}
    values = {**DEFAULTS, **config, **FORCED}
    settings["config"] = {
        **{f"{project['name']}:{key}": value for key, value in values.items()},
        "kubernetes:kubeconfig": str(kubeconfig),
    }
    stack_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return stack


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def up(stack: auto.Stack) -> dict[str, Any]:
    """`pulumi up`; the stack's outputs."""
    result = stack.up(on_output=_log)
    return {name: output.value for name, output in result.outputs.items()}


def destroy(stack: auto.Stack) -> str:
    """`pulumi destroy`; the engine's summary result."""
    return str(stack.destroy(on_output=_log).summary.result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv.bootstrap_kubernetes", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("action", choices=("up", "destroy"))
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--config", default="{}", help="the bootstrap's keys, a JSON object")
    parser.add_argument("--stack", default=DEFAULT_STACK)
    parser.add_argument("--pulumi", type=Path, help="the CLI; with --provider (else the cache's)")
    parser.add_argument("--provider", type=Path, help="pulumi-resource-kubernetes; with --pulumi")
    args = parser.parse_args(argv)
    binaries = (
        Binaries(args.pulumi, args.provider)
        if args.pulumi and args.provider
        else Binaries.from_cache()
    )
    stack = open_stack(
        args.work_dir.resolve(),
        args.kubeconfig.resolve(),
        json.loads(args.config),
        binaries,
        args.stack,
    )
    if args.action == "up":
        print(json.dumps({"outputs": up(stack)}))
    else:
        print(json.dumps({"result": destroy(stack)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
