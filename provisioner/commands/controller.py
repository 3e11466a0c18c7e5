"""`atomic-gang controller`: builds the controller from settings (``provisioner.assembly``)
and runs it until SIGTERM or a lost Lease.

Settings come from `--config FILE`, `ATOMIC_GANG_*` environment variables and one flag per
setting (see `provisioner.api.settings_sources`), flags winning. An integration mode other than
`admissioncheck` is refused before anything starts: watching Jobs directly cannot stop their
pods from being created before the capacity exists.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from provisioner import logs
from provisioner.api.settings_sources import SettingsError, settings_from_argv
from provisioner.assembly import ServedWebhook, build_system, build_webhook
from provisioner.controllers.manager import Manager
from provisioner.kube.connect import controller_cluster
from provisioner.kube.leader import default_identity
from provisioner.kube.ownership_key import OwnershipKeyUnavailable

log = logging.getLogger("atomic-gang")


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    pre.add_argument("--pulumi-root", help="directory holding bin/pulumi (default: PATH)")
    pre.add_argument("--log-level", default="INFO")
    pre.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=logs.default_format(),
        help="text, or json (one object per line with the record's fields; the image's default)",
    )
    pre.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or default_identity(),
        help="leader-election identity (default: $POD_NAME, else host name + random suffix)",
    )
    known, rest = pre.parse_known_args(argv)
    logs.configure(known.log_level, known.log_format)
    try:
        settings = settings_from_argv(rest)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kube = controller_cluster(known.kubeconfig)
    stop = threading.Event()
    try:
        system = build_system(
            settings,
            kube,
            _pulumi_root(known.pulumi_root),
            identity=known.identity,
            on_lost_leadership=stop.set,
        )
    except OwnershipKeyUnavailable as err:
        # Not started without the key it was configured with (see `read_ownership_key`).
        log.error("%s", err)
        return 2
    manager = system.manager
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    webhook = (
        build_webhook(settings, kube, metrics=manager.metrics) if settings.webhook.enabled else None
    )
    start(manager, webhook)
    log.info("controller %s started for cluster %s", manager.identity, settings.cluster_name)
    stop.wait()
    if webhook is not None:
        webhook.stop()
    manager.stop()
    system.driver.close()
    return 0


WEBHOOK_GATE = "webhook serving a certificate the caBundle trusts"


def start(manager: Manager, webhook: ServedWebhook | None) -> None:
    """Start the manager, then the webhook, whose readiness gate is in place first.

    The manager serves /readyz as soon as it starts and answers ready once its informers
    have synced. A gate added after that leaves a window in which a replica is Ready while
    its webhook does not listen yet; a Service then sends it admission reviews, and with
    `failurePolicy: Fail` the API server refuses gang Jobs with "connection refused".
    Every replica serves the webhook: admission does not wait for a leader election.
    """
    if webhook is not None:
        manager.readiness_gates[WEBHOOK_GATE] = webhook.ready
    manager.start()
    if webhook is not None:
        webhook.start()


def _pulumi_root(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    found = shutil.which("pulumi")
    if found is None:
        raise SystemExit(
            "error: no Pulumi CLI on PATH; pass --pulumi-root DIR (the directory holding "
            "bin/pulumi), or install the CLI (`atomic-gang tools --only pulumi`)."
        )
    return Path(found).resolve().parent.parent


if __name__ == "__main__":
    raise SystemExit(main())
