"""`atomic-gang`: the command line of the controller and its operators.

Each subcommand hands off to the module that owns the work, imported only when that
subcommand runs (`tools` must work before the Kubernetes client is even importable on a
broken install). The local environment has its own command, `python -m devenv`.
"""

from __future__ import annotations

import argparse
import sys

from provisioner.api import kueue_objects as ko


def _tools(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.toolchain import installer

    return installer.main(rest)


def _doctor(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner import doctor

    return doctor.main(args.work_dir, args.kubeconfig, args.config, args.queue, args.check)


def _explain(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner import explain

    return explain.main(args.job, args.work_dir, args.kubeconfig, args.config)


def _controller(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.controllers.main import main

    return main(rest)


def _pools(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.cli_pools import main

    return main(rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atomic-gang",
        description="N-or-0 EKS node provisioning for Kueue gang jobs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    tools = sub.add_parser(
        "tools", help="build or find the pinned Pulumi CLI, apiserver, etcd, Kueue, helm",
        add_help=False,
    )
    tools.set_defaults(handler=_tools)

    controller = sub.add_parser(
        "controller",
        help="run the controller (settings: --config FILE, ATOMIC_GANG_* env, flags)",
        add_help=False,
    )
    controller.set_defaults(handler=_controller)

    pools = sub.add_parser(
        "pools",
        help="table of pools: phase, instance IDs, stack state, last stack operation",
        add_help=False,
    )
    pools.set_defaults(handler=_pools)

    for name, handler, text in (
        ("doctor", _doctor, "preflight checks of the queue, check, Lease and AWS identity"),
        ("explain", _explain, "why a Job is not running yet: explain NAMESPACE/JOB"),
    ):
        cmd = sub.add_parser(name, help=text)
        if name == "explain":
            cmd.add_argument("job", help="NAMESPACE/JOB")
        cmd.add_argument("--work-dir", help="a local environment's directory (`make dev-up`'s)")
        cmd.add_argument("--kubeconfig", help="kubeconfig (default: the local environment's)")
        cmd.add_argument("--config", help="the controller's settings file")
        cmd.add_argument("--queue", default=f"default/{ko.QUEUE_NAME}", help="NAMESPACE/NAME")
        cmd.add_argument("--check", default=ko.CHECK_NAME, help="our AdmissionCheck")
        cmd.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    passes_through = args.command in ("controller", "pools", "tools")
    if rest and not passes_through:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.handler(args, rest))


if __name__ == "__main__":
    sys.exit(main())
