"""`python -m provisioner.webhook`: serve the gang job and pod webhook alone, without the
controller.

Used by the integration tests (which stop it to show the webhook fails closed) and for
trying the webhook against a cluster. The controller itself starts `WebhookServer` in
process; both read the same settings file. The webhook reads the pool a gang Job names,
the Node a pod names and the owner a controller reference names from the cluster:
`--kubeconfig`, or the pod's in-cluster account.
"""

from __future__ import annotations

import argparse
import logging
import sys

from provisioner.api.settings_sources import SettingsError, load_settings
from provisioner.kube.admission_reads import node_pool_lookup, owner_lookup, queue_class_lookup
from provisioner.kube.client import KubeClient
from provisioner.kube.pool_reads import pool_lookup
from provisioner.webhook.server import WebhookServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioner.webhook")
    parser.add_argument("--config", required=True, help="the controller's settings file")
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-key-file", required=True)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, help="default: the settings' webhookPort")
    parser.add_argument(
        "--kubeconfig", help="where to read pools from (default: the in-cluster account)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings(args.config)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kube = (
        KubeClient.from_kubeconfig(args.kubeconfig) if args.kubeconfig else KubeClient.in_cluster()
    )
    reader = kube.with_timeout(5.0)
    WebhookServer(
        settings,
        args.tls_cert_file,
        args.tls_key_file,
        pools=pool_lookup(reader),
        nodes=node_pool_lookup(reader),
        owners=owner_lookup(reader),
        classes=queue_class_lookup(reader, settings.controller_name),
        host=args.host,
        port=args.port,
    ).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
