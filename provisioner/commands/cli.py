"""`atomic-gang`: the command line of the controller and its operators.

Each subcommand hands off to the module that owns the work, imported only when that
subcommand runs (`tools` must work before the Kubernetes client is even importable on a
broken install). The local environment has its own command, `python -m devenv`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from provisioner.api import kueue_objects as ko
from provisioner.commands.kubectl_flags import (
    EXIT_CODES,
    EXIT_ERROR,
    UsageError,
    add_cluster_flags,
    add_output_flag,
    formatter,
)

DISTRIBUTION = "atomic-gang-provisioner"
# An error the command met (no cluster, settings not found): 1, as kubectl. Usage errors
# are argparse's 2 (`kubectl_flags`).
EXIT_CANNOT_RUN = EXIT_ERROR


def version() -> str:
    """The installed package's version (the wheel's metadata; the source tree's when run
    from a checkout that was never installed)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _tools(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.toolchain import installer

    return installer.main(rest)


def _where(args: argparse.Namespace) -> Any:
    from provisioner.commands.target import Where

    return Where(
        kubeconfig=args.kubeconfig,
        context=args.context,
        work_dir=args.work_dir,
        config=args.config,
        controller_namespace=args.controller_namespace,
        settings_configmap=args.settings_configmap,
        service_account=args.service_account,
        as_controller=getattr(args, "as_controller", False),
    )


def _doctor(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands import doctor

    check = args.check or ko.CHECK_NAME
    return doctor.main(
        _where(args),
        _queue(args),
        check,
        args.kueue_config,
        _launch(args),
        output=args.output,
        namespace=args.namespace,
    )


def _queue(args: argparse.Namespace) -> str | None:
    """--queue as NAMESPACE/NAME: kubectl's way, a bare NAME is in -n's namespace, else the
    kubeconfig context's."""
    queue: str | None = args.queue
    if not queue or "/" in queue:
        return queue
    if args.namespace:
        return f"{args.namespace}/{queue}"
    from provisioner.kube.connect import default_namespace

    return f"{default_namespace(args.kubeconfig, args.context)}/{queue}"


def _launch(args: argparse.Namespace) -> Any:
    """The launch check's shape: --launch-job FILE, or the --launch-* flags, or None."""
    from pathlib import Path

    from provisioner.commands.doctor_launch import LaunchShape

    if args.launch_job:
        return Path(args.launch_job)
    if not args.launch_type:
        return None
    return LaunchShape(
        instance_type=args.launch_type,
        count=args.launch_count,
        mode=args.launch_mode,
        zones=tuple(z for z in (args.launch_zones or "").split(",") if z),
        subnets=tuple(s for s in (args.launch_subnets or "").split(",") if s),
        reservation=args.launch_reservation,
    )


def _explain(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands import explain

    return explain.main(
        args.job, _where(args), args.check, namespace=args.namespace, output=args.output
    )


def _controller(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands.controller import main

    return main(rest)


def _pools(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands.pools import main

    return main(rest, prog=f"{args.prog} pools")


def _offerings(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands.offerings import main

    return main(rest, prog=f"{args.prog} offerings")


def _drain(args: argparse.Namespace, rest: list[str]) -> int:
    from provisioner.commands.drain import main

    return main(rest, prog=f"{args.prog} drain")


EXAMPLES = """examples (kubectl's flags mean what they mean in kubectl):
  {prog} explain -n team-a job/train          # or: explain job/train -n team-a
  {prog} explain team-a/train                 # the first releases' NAMESPACE/NAME
  {prog} explain -n team-a jobset/pretrain -o yaml
  {prog} doctor --context prod -n team-a --queue gpu
  {prog} pools -o wide                        # reads no Pulumi CLI
  {prog} offerings --instance-type p5.48xlarge --count 2 --duration 24h --max-fee 1600
  {prog} drain --controller-namespace platform

"""


def build_parser(prog: str = "atomic-gang") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="N-or-0 EKS node provisioning for Kueue gang jobs. Installed as "
        "`atomic-gang` and as the kubectl plugin `kubectl-atomic_gang` (`kubectl atomic-gang`).",
        epilog=EXAMPLES.format(prog=prog) + EXIT_CODES,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"{prog} {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    tools = sub.add_parser(
        "tools",
        help="build or find the pinned Pulumi CLI, apiserver, etcd, Kueue, helm",
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
        help="table of pools: phase, instance IDs, stack state, last stack operation "
        "(-o wide|json|yaml; no Pulumi CLI needed)",
        add_help=False,
    )
    pools.set_defaults(handler=_pools)

    offerings = sub.add_parser(
        "offerings",
        help="the Capacity Blocks EC2 offers for a gang and the one that would be bought "
        "(earliest within --max-fee); buys nothing",
        add_help=False,
    )
    offerings.set_defaults(handler=_offerings)

    drain = sub.add_parser(
        "drain",
        help="before `helm uninstall`: stop our queues, release every pool, wait for 0 "
        "instances, no stack and no GangNodePool",
        add_help=False,
    )
    drain.set_defaults(handler=_drain)

    for name, handler, text in (
        (
            "doctor",
            _doctor,
            "preflight checks of the queue, check, Lease, Kueue, cert-manager, AWS identity "
            "and Pulumi state; with --launch-job or --launch-type, a dry run of the launch",
        ),
        ("explain", _explain, "why a Job is not running yet: explain [-n NS] [KIND/]NAME"),
    ):
        cmd = sub.add_parser(
            name, help=text, description=text, epilog=EXIT_CODES, formatter_class=formatter
        )
        if name == "explain":
            cmd.add_argument(
                "job",
                nargs="+",
                metavar="[KIND/]NAME",
                help="the Job, JobSet, PyTorchJob, TrainJob or MPIJob, as kubectl names it (job/x, "
                "jobset x, x) in -n's namespace; NAMESPACE/NAME and NAMESPACE/KIND/NAME work "
                "too",
            )
            namespace = "the object's namespace (default: the kubeconfig context's, else default)"
        else:
            namespace = (
                "the namespace of --queue NAME, and without --queue the namespace whose "
                "LocalQueues are checked (default: every namespace)"
            )
        add_cluster_flags(cmd, namespace=namespace)
        cmd.add_argument(
            "--settings-configmap", metavar="NAMESPACE/NAME", help="the settings ConfigMap to use"
        )
        cmd.add_argument(
            "--config", metavar="FILE", help="a local settings file instead of the ConfigMap"
        )
        cmd.add_argument(
            "--work-dir", help="a local environment's directory (`make dev-up`'s .devenv)"
        )
        cmd.add_argument(
            "--service-account",
            metavar="NAME",
            help="the controller's ServiceAccount (default: the release's)",
        )
        cmd.add_argument(
            "--check", help="our AdmissionCheck (default: the one naming our controller)"
        )
        add_output_flag(
            cmd,
            "text",
            wide="the same as text (no columns to widen)",
            documents="one document on stdout (see docs: CLI output)",
        )
        if name == "doctor":
            _doctor_flags(cmd)
        cmd.set_defaults(handler=handler)
    return parser


def _doctor_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--queue",
        metavar="[NAMESPACE/]NAME",
        help="check this LocalQueue only (a bare NAME is in -n's namespace; default: every "
        "LocalQueue with a pending gang Workload, else every LocalQueue whose ClusterQueue "
        "lists our check)",
    )
    cmd.add_argument(
        "--as-controller",
        action="store_true",
        help="run the AWS checks as the controller's role (STS AssumeRole of the "
        "role its ServiceAccount's IRSA annotation or Pod Identity association names)",
    )
    cmd.add_argument(
        "--kueue-config",
        default="kueue-system/kueue-manager-config",
        metavar="NAMESPACE/NAME",
        help="the ConfigMap Kueue's manager reads its configuration from",
    )
    launch = cmd.add_argument_group(
        "launch check",
        "Send the launch the controller would send for a Job or a pool shape to EC2 "
        "with DryRun=True (the pool's CreateLaunchTemplate if it does not exist yet, "
        "then RunInstances per subnet or the one CreateFleet) and report EC2's "
        "answer: DryRunOperation (it would launch), UnauthorizedOperation naming the "
        "missing action, or the parameter error, each with its fix. Nothing is "
        "launched or created.",
    )
    launch.add_argument(
        "--launch-job", metavar="FILE", help="a Job manifest: check its gang's launch"
    )
    launch.add_argument("--launch-type", metavar="TYPE", help="or a pool shape: its instance type")
    launch.add_argument("--launch-count", type=int, default=1, help="gang size N")
    launch.add_argument("--launch-mode", choices=["runinstances", "fleet"], default="runinstances")
    launch.add_argument("--launch-zones", metavar="AZ,AZ", help="availability zones")
    launch.add_argument("--launch-subnets", metavar="SUBNET,SUBNET", help="subnets")
    launch.add_argument(
        "--launch-reservation", metavar="CR_ID", help="a capacity reservation to target"
    )


def main(argv: list[str] | None = None, *, prog: str = "atomic-gang") -> int:
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(argv)
    args.prog = prog
    passes_through = args.command in ("controller", "drain", "offerings", "pools", "tools")
    if rest and not passes_through:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.handler(args, rest))
    except UsageError as err:
        parser.error(f"{args.command}: {err}")  # exits 2
    except Exception as err:
        return _cannot_run(err, prog)


def _cannot_run(err: Exception, prog: str) -> int:
    """A cluster that cannot be reached (or that fails mid-command) is one line on stderr and
    exit code 1; anything else is a bug and keeps its traceback."""
    # Imported here: `tools` and --help must work before the Kubernetes client imports.
    from provisioner.kube.errors import KubeError

    if not isinstance(err, KubeError):
        raise err
    print(f"{prog}: error: {err}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def kubectl_plugin() -> int:
    """`kubectl atomic-gang ...`: kubectl runs `kubectl-atomic_gang` from PATH (a dash in a
    plugin's command is an underscore in its file name)."""
    return main(prog="kubectl atomic-gang")


if __name__ == "__main__":
    sys.exit(main())
