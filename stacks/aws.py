"""boto3 clients for the pool providers, found inside each provider call from plain props.

Called by every provider method in ``stacks``. Providers are pickled into the stack state,
so they hold no client: each call asks for one by the resource's own ``region`` and
``endpoint`` props. The session behind the clients is one per provider-host process (it
caches the service models, which take a noticeable part of a second to load) and uses the
default credential chain, so the provider host acts as the controller's own identity (Pod
Identity in a cluster, dummy keys against the emulator). Clients are kept per (service,
region, endpoint): the shared provider host lives as long as the controller, and making a
client costs tens of milliseconds each call would pay again. A boto3 client may be used
from several threads; its credentials refresh themselves. Each client is fenced: while the
controller's leadership fence is closed, no mutating call leaves this process
(``provisioner.cloud.fencing``, the fence file the stack driver names).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

from provisioner.cloud.ec2api import client_config, default_session, make_client
from provisioner.cloud.errors import error_code
from provisioner.cloud.fencing import fence_client, host_gate
from stacks.props import Connection

__all__ = ["client", "code_of", "common_props"]

_CONFIG: Final = client_config()
_lock = threading.Lock()
_session: Any = None
_clients: dict[tuple[str, str, str], Any] = {}
# The controller's leadership fence, as the stack driver names it to this process: every
# client refuses a mutating call while it is closed (``provisioner.cloud.fencing``).
_GATE: Final = host_gate()


def _shared_session() -> Any:
    global _session
    with _lock:
        if _session is None:
            _session = default_session()
        return _session


def client(service: str, props: Mapping[str, Any]) -> Any:
    """A client for ``service`` in the resource's region, at its endpoint if it names one."""
    key = (service, str(props["region"]), str(props.get("endpoint") or ""))
    session = _shared_session()
    # Client creation from one session is not thread-safe; the provider host serves
    # requests on several threads.
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = make_client(session, *key, _CONFIG)
            if _GATE is not None:
                fence_client(found, _GATE)
            _clients[key] = found
        return found


def code_of(exc: BaseException) -> str:
    """The AWS error code of ``exc``, or "" when it carries none."""
    return error_code(exc) or ""


def common_props(region: str, endpoint_url: str) -> Connection:
    """The connection props every pool resource carries."""
    return {"region": region, "endpoint": endpoint_url}
