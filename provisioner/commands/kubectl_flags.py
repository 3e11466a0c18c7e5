"""The flags the commands share with kubectl, the output formats and the exit codes.

Called by the parsers of `cli` (doctor, explain), `pools` and `drain`, so that each flag
means one thing everywhere and what kubectl users expect (`kubectl options`):

- `--kubeconfig FILE` and `--context NAME`: the cluster, as kubectl finds it
  (`provisioner.kube.connect`).
- `-n/--namespace NS`: the namespace of the user's objects (a Job, a LocalQueue); without
  it, the kubeconfig context's namespace, else `default` (`kube.connect.default_namespace`).
- `--controller-namespace NS`: where the controller is installed (the chart's release
  namespace, where its settings ConfigMap is looked for; `installation`).
- `-o/--output`: the human view by default, `wide` with more columns, `json` or `yaml` for
  scripts (one document on stdout, the same keys in both).

Exit codes, as kubectl and argparse use them: 0 ok, 1 an error (a cluster not reached, an
object not found, a failed check), 2 a usage error (argparse's own code).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_cluster_flags",
    "add_output_flag",
    "dump",
    "formatter",
]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_CODES: Final = (
    "exit codes: 0 ok; 1 an error (cluster not reached, object not found, a check failed); "
    "2 a usage error (unknown, missing or contradicting arguments)"
)
# `installation.CHART_NAMESPACE`, repeated: --help must not import the Kubernetes client.
CHART_NAMESPACE: Final = "atomic-gang-system"


class UsageError(ValueError):
    """The arguments do not say one thing (e.g. a namespace written in the object's name
    that -n contradicts): the command prints the message as argparse does and exits 2."""


def formatter(prog: str) -> argparse.HelpFormatter:
    """Help that keeps the epilog's lines (the exit codes, the examples) as written."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def add_cluster_flags(parser: argparse.ArgumentParser, *, namespace: str | None) -> None:
    """--kubeconfig, --context, --controller-namespace, and -n/--namespace with
    ``namespace`` as its help (None: the command works on every namespace; -n is kept,
    hidden, so that the command can refuse it with a sentence rather than argparse's)."""
    group = parser.add_argument_group("cluster (as kubectl)")
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig (default: $KUBECONFIG or ~/.kube/config, else in-cluster)",
    )
    group.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context (default: the current one)"
    )
    if namespace is not None:
        group.add_argument("-n", "--namespace", metavar="NS", help=namespace)
    else:
        group.add_argument("-n", "--namespace", metavar="NS", help=argparse.SUPPRESS)
    group.add_argument(
        "--controller-namespace",
        metavar="NS",
        help=f"the controller's release namespace, where the chart's settings ConfigMap is "
        f"looked for (default: {CHART_NAMESPACE}, then every namespace)",
    )


def add_output_flag(
    parser: argparse.ArgumentParser, human: str, *, wide: str, documents: str
) -> None:
    """-o/--output: ``human`` (the default), wide, json, yaml."""
    parser.add_argument(
        "-o",
        "--output",
        choices=[human, "wide", "json", "yaml"],
        default=human,
        help=f"{human} (default); wide: {wide}; json or yaml: {documents}",
    )


def dump(document: Any, output: str) -> str:
    """One document as `-o json` or `-o yaml` prints it (the same keys)."""
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True)).rstrip("\n")
    return json.dumps(document, indent=2)
