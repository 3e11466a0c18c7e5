"""`python -m devenv up | down | status | demo`: the embedded default, from a checkout.

The dev environment is not part of the product (it is not in the wheel or the image), so
its commands live here rather than under `atomic-gang`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devenv",
        description="the local environment: control plane, Kueue, AWS emulator, simulators",
    )
    parser.add_argument("command", choices=["up", "down", "status", "demo"])
    parser.add_argument("--work-dir", help="where state and logs live (default .devenv)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from devenv import demo

        return demo.run(Path(args.work_dir or ".devenv/demo").resolve())
    from devenv import daemon

    handlers = {"up": daemon.up, "down": daemon.down, "status": daemon.status}
    return handlers[args.command](Path(args.work_dir or ".devenv"))


if __name__ == "__main__":
    sys.exit(main())
