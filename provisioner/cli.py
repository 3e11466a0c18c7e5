"""`atomic-gang`: the command line of the controller and of its local environment.

Each subcommand hands off to the module that owns the work, imported only when that
subcommand runs (the controller must not import the test environment, and `dev tools`
must work before the Kubernetes client is even importable on a broken install).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _dev(args: argparse.Namespace, rest: list[str]) -> int:
    if args.dev_command == "tools":
        from provisioner.devenv import tools

        return tools.main(rest)
    from provisioner.devenv import daemon

    work_dir = Path(args.work_dir)
    handlers = {"up": daemon.up, "down": daemon.down, "status": daemon.status}
    return handlers[args.dev_command](work_dir)


def _demo(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.devenv import demo

    return demo.run(Path(args.work_dir).resolve())


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

    dev = sub.add_parser("dev", help="the local environment (control plane, Kueue, EC2 emulator)")
    dev.add_argument("dev_command", choices=["tools", "up", "down", "status"])
    dev.add_argument("--work-dir", default=".devenv", help="where state and logs live")
    dev.set_defaults(handler=_dev)

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

    demo = sub.add_parser("demo", help="run the scripted scenario on the embedded default")
    demo.add_argument("--work-dir", default=".devenv/demo")
    demo.set_defaults(handler=_demo)

    for name, handler, text in (
        ("doctor", _doctor, "preflight checks of the queue, check, Lease and AWS identity"),
        ("explain", _explain, "why a Job is not running yet: explain NAMESPACE/JOB"),
    ):
        cmd = sub.add_parser(name, help=text)
        if name == "explain":
            cmd.add_argument("job", help="NAMESPACE/JOB")
        cmd.add_argument("--work-dir", help="a local environment's directory (`dev up`'s)")
        cmd.add_argument("--kubeconfig", help="kubeconfig (default: the local environment's)")
        cmd.add_argument("--config", help="the controller's settings file")
        cmd.add_argument("--queue", default="default/atomic-gang-queue", help="NAMESPACE/NAME")
        cmd.add_argument("--check", default="atomic-gang-check", help="our AdmissionCheck")
        cmd.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    passes_through = args.command in ("controller", "pools") or (
        args.command == "dev" and args.dev_command == "tools"
    )
    if rest and not passes_through:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.handler(args, rest))


if __name__ == "__main__":
    sys.exit(main())
