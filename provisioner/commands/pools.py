"""`atomic-gang pools`: every pool, with its phase, instances, stack state and last operation.

Called by `provisioner.commands.cli` (`main(argv)`). Reads two sources and joins them by
pool name: the GangNodePools in the cluster (phase, and the instance ids the reconciler
persisted) and the pools' Pulumi stacks through the stack driver (resources, lock, pending
operations, recorded gang, the driver's last operation record). A stack without a
GangNodePool is listed too: that is a pool whose custom resource is gone while its stack is
not. Nothing here writes anything; on a `file://` backend the stack columns cost no CLI run
at all.

The footer prints the exact `pulumi stack ls` command for the same inventory.

From a laptop, the cluster's kubeconfig is enough: without settings flags the installed
controller's settings (its state backend, secrets provider, project) are read from the
chart's settings ConfigMap, found as `doctor` finds it (`provisioner.commands.installation`),
and the stacks' work files go to a temporary directory instead of the pod's state directory.
"""

from __future__ import annotations

import argparse
import json
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

__all__ = ["PoolRow", "build_rows", "main", "render_json", "render_table"]

HEADERS = ("POOL", "PHASE", "INSTANCES", "STACK", "LAST OPERATION")


@dataclass(frozen=True)
class PoolRow:
    pool: str
    phase: str
    instances: tuple[str, ...]
    stack: str
    last_operation: str


def _stack_state(summary: Any | None) -> str:
    if summary is None:
        return "none"
    if summary.locked:
        return "locked"
    if summary.pending_operations:
        return f"{summary.pending_operations} pending operation(s)"
    count = summary.resource_count
    return "ok" if count is None else f"ok, {count} resources"


def build_rows(
    stacks: Sequence[Any],
    outputs: Mapping[str, Any | None],
    last_operations: Mapping[str, Any | None],
    gang_node_pools: Sequence[Mapping[str, Any]] | None,
) -> list[PoolRow]:
    """One row per pool known to either side (pure: the tests feed it directly).
    ``gang_node_pools`` is None when the cluster was not read."""
    by_stack = {s.name: s for s in stacks}
    by_pool = {
        str((p.get("metadata") or {}).get("name")): p
        for p in gang_node_pools or ()
        if (p.get("metadata") or {}).get("name")
    }
    rows = []
    for name in sorted(set(by_stack) | set(by_pool)):
        status = (by_pool.get(name) or {}).get("status") or {}
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
        state = _stack_state(by_stack.get(name))
        if gang_node_pools is not None and name not in by_pool:
            state += " (no GangNodePool)"
        rows.append(PoolRow(name, phase, ids, state, last))
    return rows


def render_table(rows: Sequence[PoolRow]) -> str:
    cells = [HEADERS] + [
        (r.pool, r.phase, ",".join(r.instances) or "-", r.stack, r.last_operation) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def _kube(args: argparse.Namespace) -> Any:
    """As doctor finds the cluster (`kube.connect`): a missing kubeconfig or a silent API
    server is `ClusterUnreachable`, one line from the command line."""
    from provisioner.kube.connect import open_cluster

    return open_cluster(args.kubeconfig)[0]


def _gang_node_pools(args: argparse.Namespace) -> list[dict[str, Any]]:
    from provisioner.kube.resources import GANG_NODE_POOLS

    client = _kube(args)
    try:
        return list(client.list(GANG_NODE_POOLS).items)
    finally:
        client.close()


def _installed_settings(args: argparse.Namespace) -> tuple[Settings, str]:
    """The installed controller's settings from its ConfigMap, and where they came from;
    a `DiscoveryError` names the flag to pass when there is none or more than one."""
    from provisioner.commands.installation import find_installation

    client = _kube(args)
    try:
        installation = find_installation(client, namespace=args.namespace)
    finally:
        client.close()
    return _stack_work_elsewhere(installation.settings, "atomic-gang-pools-"), installation.source


def _stack_work_elsewhere(settings: Settings, prefix: str) -> Settings:
    """`settings` with the stacks' work files in a new temporary directory (named
    `prefix`...) when the stacks live in a remote backend: a command only reads them, and
    the controller's state directory (the pod's) is not this machine's."""
    if settings.pulumi.backend_url.startswith("file://"):
        return settings
    work = Path(tempfile.mkdtemp(prefix=prefix))
    pulumi = settings.pulumi.model_copy(update={"state_dir": work})
    return settings.model_copy(update={"pulumi": pulumi})


def _default_pulumi_root() -> Path | None:
    found = shutil.which("pulumi")
    return Path(found).resolve().parent.parent if found else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atomic-gang pools",
        description="List every pool: phase, instances, Pulumi stack state, last operation. "
        "Settings flags (--config FILE, --pulumi.state-dir DIR, ...) are the controller's.",
    )
    parser.add_argument("--pulumi-root", type=Path, help="directory holding bin/pulumi")
    parser.add_argument(
        "--kubeconfig",
        help="default: $KUBECONFIG or ~/.kube/config's current context, else in-cluster",
    )
    parser.add_argument(
        "--no-kube", action="store_true", help="list stacks only, without reading the cluster"
    )
    parser.add_argument(
        "--namespace",
        help="where the chart's settings ConfigMap is looked for when no settings flag is "
        "given (default: atomic-gang-system, then every namespace)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="table (default), or a JSON list of rows (`render_json`)",
    )
    parser.add_argument("--json", action="store_true", help="the same as -o json")
    return parser


def render_json(rows: Sequence[PoolRow]) -> str:
    """The rows as a JSON list, one object per pool with the table's columns as keys:
    ``pool``, ``phase``, ``instances`` (a list of IDs), ``stack``, ``last_operation``."""
    return json.dumps([asdict(r) | {"instances": list(r.instances)} for r in rows], indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(argv)
    from provisioner.commands.installation import DiscoveryError

    try:
        if rest or args.no_kube:
            settings = settings_from_argv(rest)
        else:
            settings, source = _installed_settings(args)
            print(f"settings: {source}", file=sys.stderr)
    except (SettingsError, DiscoveryError) as exc:
        print(exc, file=sys.stderr)
        return 2
    root = args.pulumi_root or _default_pulumi_root()
    if root is None:
        print("no Pulumi CLI found: pass --pulumi-root or put pulumi on PATH", file=sys.stderr)
        return 2

    from provisioner.pulumi_driver import StackDriver, StackError

    try:
        driver = StackDriver(settings, root, logging.getLogger("atomic_gang.pools"))
        stacks = driver.list_stacks()
        outputs = {s.name: driver.outputs(s.name) for s in stacks}
    except StackError as exc:
        print(exc, file=sys.stderr)
        return 1
    pools: list[dict[str, Any]] | None = None
    if not args.no_kube:
        try:
            pools = _gang_node_pools(args)
        except Exception as exc:  # the stacks alone are still worth printing
            print(f"warning: GangNodePools not read ({exc}); stacks only", file=sys.stderr)
    names = {s.name for s in stacks} | {str(p["metadata"]["name"]) for p in pools or ()}
    rows = build_rows(stacks, outputs, {n: driver.last_operation(n) for n in names}, pools)
    if args.json or args.output == "json":
        print(render_json(rows))
    else:
        print(render_table(rows))
        print(f"\nInventory with the Pulumi CLI: {driver.operator_command()}")
    return 0
