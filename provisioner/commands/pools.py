"""`atomic-gang pools`: every pool, with its phase, instances, stack state and last operation.

Called by `provisioner.commands.cli` (`main(argv)`). Reads two sources and joins them by
pool name: the GangNodePools in the cluster (phase, owner namespace, shape, and the instance
ids the reconciler persisted) and the pools' Pulumi stacks (resources, lock, pending
operations, recorded gang; the controller's last operation record when its state directory
is this machine's). Nothing here writes anything.

No Pulumi CLI is needed: the stacks are read straight from the state backend
(`pulumi_driver.inventory`: the `file://` directory or the `s3://` bucket), as read-only
commands should on a laptop. A backend that only the CLI reads (Pulumi Cloud, gs://) is read
through it when `--pulumi-root` or PATH has one; without one the pools are still listed from
the cluster, their stack column `unknown`, with a note saying why. The footer prints the
exact `pulumi stack ls` command for the same inventory.

From a laptop, the cluster's kubeconfig is enough: without settings flags the installed
controller's settings (its state backend, project) are read from the chart's settings
ConfigMap, found as `doctor` finds it (`provisioner.commands.installation`). `-n NS` lists
the pools that belong to namespace NS (their `spec.ownerNamespace`), as kubectl's -n does.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioner.api.settings import Settings
from provisioner.api.settings_sources import SettingsError, settings_from_argv
from provisioner.cloud.errors import CloudError
from provisioner.commands.kubectl_flags import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_OK,
    add_cluster_flags,
    add_output_flag,
    dump,
    formatter,
)
from provisioner.pulumi_driver.inventory import operator_command

__all__ = ["PoolRow", "build_rows", "main", "render", "render_json", "render_table"]

HEADERS = ("POOL", "PHASE", "INSTANCES", "STACK", "LAST OPERATION")
WIDE_HEADERS = (*HEADERS, "NAMESPACE", "TYPE", "COUNT", "READY")
UNKNOWN = "unknown"


@dataclass(frozen=True)
class PoolRow:
    pool: str
    phase: str
    instances: tuple[str, ...]
    stack: str
    last_operation: str
    # The wide columns (`-o wide`), from the GangNodePool; "-" for a stack without one.
    namespace: str = "-"
    instance_type: str = "-"
    count: str = "-"
    ready: str = "-"

    def cells(self, wide: bool) -> tuple[str, ...]:
        ids = ",".join(self.instances) or "-"
        cells = (self.pool, self.phase, ids, self.stack, self.last_operation)
        return cells + (self.namespace, self.instance_type, self.count, self.ready) * wide


def _stack_state(summary: Any | None, read: bool) -> str:
    if summary is None:
        return "none" if read else UNKNOWN
    if summary.locked:
        return "locked"
    if summary.pending_operations:
        return f"{summary.pending_operations} pending operation(s)"
    count = summary.resource_count
    return "ok" if count is None else f"ok, {count} resources"


def owner_namespace(pool: Mapping[str, Any]) -> str | None:
    spec = pool.get("spec") or {}
    return spec.get("ownerNamespace") or (spec.get("claim") or {}).get("namespace")


def build_rows(
    stacks: Sequence[Any],
    outputs: Mapping[str, Any | None],
    last_operations: Mapping[str, Any | None],
    gang_node_pools: Sequence[Mapping[str, Any]] | None,
    *,
    stacks_read: bool = True,
) -> list[PoolRow]:
    """One row per pool known to either side (pure: the tests feed it directly).
    ``gang_node_pools`` is None when the cluster was not read; ``stacks_read`` False when
    the stacks could not be (their column says unknown, not none)."""
    by_stack = {s.name: s for s in stacks}
    by_pool = {
        str((p.get("metadata") or {}).get("name")): p
        for p in gang_node_pools or ()
        if (p.get("metadata") or {}).get("name")
    }
    rows = []
    for name in sorted(set(by_stack) | set(by_pool)):
        pool = by_pool.get(name) or {}
        status, spec = pool.get("status") or {}, pool.get("spec") or {}
        phase = str(status.get("phase") or ("-" if name not in by_pool else "Idle"))
        recorded = outputs.get(name)
        ids = tuple(recorded.instance_ids) if recorded is not None else ()
        if not ids:
            ids = tuple(str(i) for i in status.get("instanceIds") or ())
        op = last_operations.get(name)
        if op is not None:
            last = op.summary()
        elif status.get("lastStackOperation"):
            last = f"{status['lastStackOperation']} {status.get('lastStackResult') or ''}".strip()
        else:
            last = "-"
        state = _stack_state(by_stack.get(name), stacks_read)
        if gang_node_pools is not None and name not in by_pool:
            state += " (no GangNodePool)"
        wide = (
            (
                owner_namespace(pool) or "-",
                str(spec.get("instanceType") or "-"),
                str(spec.get("count") or "-"),
                str(status.get("readyNodes") or 0),
            )
            if pool
            else ("-",) * 4
        )
        rows.append(PoolRow(name, phase, ids, state, last, *wide))
    return rows


def render_table(rows: Sequence[PoolRow], *, wide: bool = False) -> str:
    cells = [WIDE_HEADERS if wide else HEADERS] + [r.cells(wide) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _kube(args: argparse.Namespace) -> Any:
    """As doctor finds the cluster (`kube.connect`): a missing kubeconfig or a silent API
    server is `ClusterUnreachable`, one line from the command line."""
    from provisioner.kube.connect import open_cluster

    return open_cluster(args.kubeconfig, context=args.context)[0]


def _gang_node_pools(args: argparse.Namespace) -> list[dict[str, Any]]:
    from provisioner.kube.resources import GANG_NODE_POOLS

    client = _kube(args)
    try:
        return list(client.list(GANG_NODE_POOLS).items)
    finally:
        client.close()


def installed_settings(args: argparse.Namespace) -> tuple[Settings, str]:
    """The installed controller's settings from its ConfigMap, and where they came from;
    a `DiscoveryError` names the flag to pass when there is none or more than one."""
    from provisioner.commands.installation import find_installation

    client = _kube(args)
    try:
        installation = find_installation(client, namespace=args.controller_namespace)
    finally:
        client.close()
    return installation.settings, installation.source


def _stack_work_elsewhere(settings: Settings, prefix: str) -> Settings:
    """`settings` with the stacks' work files in a new temporary directory (named
    `prefix`...) when the stacks live in a remote backend: a command only reads them, and
    the controller's state directory (the pod's) is not this machine's."""
    if settings.pulumi.backend_url.startswith("file://"):
        return settings
    work = Path(tempfile.mkdtemp(prefix=prefix))
    pulumi = settings.pulumi.model_copy(update={"state_dir": work})
    return settings.model_copy(update={"pulumi": pulumi})


def stack_reader(
    settings: Settings, *, local_state: bool, pulumi_root: Path | None, prefix: str
) -> Any:
    """What lists the stacks: the backend read directly (no CLI), else, for a backend only
    the CLI reads, the stack driver on the CLI found; else the sentence saying why the
    stacks cannot be read here."""
    from provisioner.pulumi_driver.inventory import inventory_for, reads_without_cli

    if reads_without_cli(settings):
        return inventory_for(settings, local_state=local_state)
    found = shutil.which("pulumi")
    root = pulumi_root or (Path(found).resolve().parent.parent if found else None)
    if root is None:
        return inventory_for(settings, local_state=local_state)  # the sentence
    from provisioner.pulumi_driver import StackDriver

    log = logging.getLogger("atomic_gang.pools")
    return StackDriver(_stack_work_elsewhere(settings, prefix), root, log)


def build_parser(prog: str = "atomic-gang pools") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List every pool: phase, instances, Pulumi stack state, last operation. "
        "Reads the state backend directly: no Pulumi CLI needed. Settings flags "
        "(--config FILE, --pulumi.state-dir DIR, ...) are the controller's.",
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    add_cluster_flags(
        parser,
        namespace="only the pools that belong to this namespace (default: every pool; "
        "GangNodePools are cluster-scoped)",
    )
    parser.add_argument(
        "--pulumi-root",
        type=Path,
        help="directory holding bin/pulumi: only for a backend neither file:// nor s3://",
    )
    parser.add_argument(
        "--no-kube", action="store_true", help="list stacks only, without reading the cluster"
    )
    add_output_flag(
        parser,
        "table",
        wide="also NAMESPACE, TYPE, COUNT, READY",
        documents="a list of rows (`render_json`)",
    )
    parser.add_argument("--json", action="store_true", help="the same as -o json")
    return parser


def render_json(rows: Sequence[PoolRow], output: str = "json") -> str:
    """The rows as a JSON (or YAML) list, one object per pool with the wide table's columns
    as keys: ``pool``, ``phase``, ``instances`` (a list of IDs), ``stack``,
    ``last_operation``, ``namespace``, ``instance_type``, ``count``, ``ready``."""
    return dump([asdict(r) | {"instances": list(r.instances)} for r in rows], output)


def render(rows: Sequence[PoolRow], output: str) -> str:
    if output in ("json", "yaml"):
        return render_json(rows, output)
    return render_table(rows, wide=output == "wide")


def main(argv: Sequence[str] | None = None, *, prog: str = "atomic-gang pools") -> int:
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(argv)
    from provisioner.commands.installation import DiscoveryError

    local = bool(rest) or args.no_kube
    try:
        if local:
            settings = settings_from_argv(rest)
        else:
            settings, source = installed_settings(args)
            print(f"settings: {source}", file=sys.stderr)
    except SettingsError as exc:
        parser.error(str(exc))  # a settings flag that does not parse: exit 2
    except DiscoveryError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR

    from provisioner.pulumi_driver import StackError

    reader = stack_reader(
        settings, local_state=local, pulumi_root=args.pulumi_root, prefix="atomic-gang-pools-"
    )
    stacks: list[Any] = []
    outputs: dict[str, Any] = {}
    if isinstance(reader, str):
        print(f"note: stack state unknown: {reader}", file=sys.stderr)
    else:
        try:
            stacks = reader.list_stacks()
            outputs = {s.name: reader.outputs(s.name) for s in stacks}
        except (StackError, CloudError) as exc:
            print(f"{prog}: error: the stacks could not be read: {exc}", file=sys.stderr)
            return EXIT_ERROR
    pools: list[dict[str, Any]] | None = None
    if not args.no_kube:
        try:
            pools = _gang_node_pools(args)
        except Exception as exc:  # the stacks alone are still worth printing
            print(f"warning: GangNodePools not read ({exc}); stacks only", file=sys.stderr)
    if args.namespace is not None:
        pools = [p for p in pools or () if owner_namespace(p) == args.namespace]
        stacks = [s for s in stacks if s.name in {p["metadata"]["name"] for p in pools}]
    names = {s.name for s in stacks} | {str(p["metadata"]["name"]) for p in pools or ()}
    last = {n: reader.last_operation(n) for n in names} if not isinstance(reader, str) else {}
    rows = build_rows(stacks, outputs, last, pools, stacks_read=not isinstance(reader, str))
    output = "json" if args.json else args.output
    print(render(rows, output))
    if output in ("table", "wide"):
        print(f"\nInventory with the Pulumi CLI: {operator_command(settings)}")
    return EXIT_OK
