"""How an operator command reaches a cluster, and a one-line error when it cannot.

Called by the operator commands (`doctor`, `explain`, `pools`, `controller`), which all find
the cluster the same way: `--kubeconfig FILE`, else `$KUBECONFIG` or `~/.kube/config`, at
`--context NAME` or the current context (as kubectl does), else the pod's in-cluster account.
`default_namespace` is the namespace kubectl would use without `-n`: the context's, else the
pod's own, else `default`. A missing or unreadable
kubeconfig, no cluster at all, or an API server that does not answer becomes
`ClusterUnreachable`, whose message names what was tried and the fix; the command line prints
it as one line and exits non-zero instead of a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import config as k8s_config

from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeError, KubeUnavailable

__all__ = [
    "PROBE_SECONDS",
    "ClusterUnreachable",
    "controller_cluster",
    "default_namespace",
    "open_cluster",
]

# The probe's per-request timeout: an operator waits this long (per retry) for a dead address.
PROBE_SECONDS = 5.0

_FIX = "pass --kubeconfig FILE, set KUBECONFIG, or run `kubectl config use-context NAME`"
# Where a pod's service account token mounts its namespace (kubectl's in-cluster default).
_POD_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ClusterUnreachable(KubeUnavailable):
    """No cluster could be reached: the message says where the command looked and the fix."""


def _client(kubeconfig: str | None, context: str | None = None) -> tuple[KubeClient, str]:
    at = f" (context {context})" if context else ""
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise ClusterUnreachable(f"kubeconfig {kubeconfig} does not exist; {_FIX}")
        try:
            client = KubeClient.from_kubeconfig(kubeconfig, context=context)
        except (k8s_config.ConfigException, OSError, ValueError) as err:
            raise ClusterUnreachable(
                f"kubeconfig {kubeconfig}{at} cannot be used ({err}); {_FIX}"
            ) from None
        return client, f"kubeconfig {kubeconfig}{at}"
    from_env = os.environ.get("KUBECONFIG", "")
    named = [p for p in from_env.split(os.pathsep) if p]
    if named and not any(Path(p).is_file() for p in named):
        raise ClusterUnreachable(f"KUBECONFIG names {from_env}, which does not exist; {_FIX}")
    try:
        return KubeClient.from_environment(context=context)
    except (k8s_config.ConfigException, OSError, ValueError) as err:
        raise ClusterUnreachable(
            f"no kubeconfig ({from_env or '~/.kube/config'}){at} and not running in a "
            f"cluster ({err}); {_FIX}"
        ) from None


def default_namespace(kubeconfig: str | None, context: str | None = None) -> str:
    """The namespace kubectl uses without `-n`: the context's (``context``, else the current
    one) in ``kubeconfig`` (else $KUBECONFIG or ~/.kube/config), else the pod's own, else
    `default`. A kubeconfig that cannot be read here is reported by `open_cluster`."""
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (k8s_config.ConfigException, OSError, ValueError):
        try:
            return _POD_NAMESPACE.read_text().strip() or "default"
        except OSError:
            return "default"
    wanted = context or (current or {}).get("name")
    for entry in contexts or ():
        if entry.get("name") == wanted:
            return str((entry.get("context") or {}).get("namespace") or "default")
    return "default"


def open_cluster(
    kubeconfig: str | None, *, context: str | None = None, probe: bool = True
) -> tuple[KubeClient, str]:
    """A client for the cluster (at kubeconfig context ``context``, else the current one),
    and how it was reached (for the report). With ``probe``, one GET of the server's
    version first, so an API server that does not answer is named here rather than as the
    first check's failure."""
    client, where = _client(kubeconfig, context)
    if probe:
        try:
            client.with_timeout(PROBE_SECONDS).server_version()
        except KubeError as err:
            client.close()
            raise ClusterUnreachable(
                f"the Kubernetes API server of {where} could not be read ({err.message}); check "
                f"that the cluster is up and reachable from here, or {_FIX}"
            ) from None
    return client, where


def controller_cluster(kubeconfig: str | None) -> KubeClient:
    """The controller's client: ``kubeconfig`` when given, else the pod's in-cluster account
    (never a developer's current context). Not probed: the controller waits for its API
    server (its informers retry), but a kubeconfig or pod account that is not there at all
    is one line, not a traceback."""
    if kubeconfig:
        return _client(kubeconfig)[0]
    try:
        return KubeClient.in_cluster()
    except (k8s_config.ConfigException, OSError, ValueError) as err:
        raise ClusterUnreachable(
            f"not running in a cluster ({err}); outside one, pass --kubeconfig FILE"
        ) from None
