"""`atomic-gang`: the command line of the controller and of its local environment.

Each subcommand hands off to the module that owns the work, imported only when that
subcommand runs (the controller must not import the test environment, and `dev tools`
must work before the Kubernetes client is even importable on a broken install).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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
    """Start the embedded default, print its state, stop it.

    The scripted gang scenario replaces this once the controller runs end to end.
    """
    from provisioner.devenv.environment import LocalEnvironment

    work_dir = Path(args.work_dir).resolve()
    env = LocalEnvironment(work_dir=work_dir)
    started = time.monotonic()
    try:
        state = env.start()
        print(json.dumps(state, indent=2))
        print(f"local environment up in {time.monotonic() - started:.1f}s")
    finally:
        env.stop()
    print("stopped; nothing left running")
    return 0


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
