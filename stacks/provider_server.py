"""One long-lived host for the pool program's dynamic providers, shared by every engine run.

Run by the stack driver as ``python -m stacks.provider_server`` (see
``provisioner.pulumi_driver.provider_host``). Without it the Pulumi CLI starts a fresh Python
provider host (``pulumi-resource-pulumi-python``) for every `up` and `destroy`; that process
start, its imports (pulumi, grpc, boto3, the provider modules) and boto3's service models
cost about as much CPU as the rest of the engine run, on every operation.

The engine attaches to an already-running provider named in ``PULUMI_DEBUG_PROVIDERS``
(``pulumi-python:<port>``) instead of starting one; the driver sets it on every CLI process.
This host serves the Pulumi SDK's own dynamic-provider servicer, the same code the per-run
host serves, plus the ``Attach`` call the engine makes to an attached provider (the SDK's
servicer leaves it unimplemented, and the engine then refuses the provider). The servicer
class lives in ``pulumi.dynamic.__main__``, whose last statement starts a server: it is
loaded here without that statement. ``tests/unit/test_provider_server.py`` pins both on
the pinned SDK, so an SDK upgrade that moves them fails there, not in production.

The servicer keeps no per-engine state our providers use (``Configure`` stores config that
no provider in ``stacks`` reads: each builds its clients from its own props), so engines
running at once can share it; gRPC serves each on its own thread.

Protocol with the driver: the port on the first line of stdout; the host exits when its
stdin closes, so it never outlives the controller that started it, however that ends.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from concurrent import futures
from typing import Any

__all__ = ["SDK_SERVICER_MODULE", "load_sdk_servicer", "main"]

SDK_SERVICER_MODULE = "pulumi.dynamic.__main__"
# Two executor workers run engines at once by default, each making a handful of calls at a
# time; more threads than that only sit idle.
_THREADS = 16


def load_sdk_servicer() -> type[Any]:
    """The SDK's ``DynamicResourceProviderServicer``, loaded without starting its server."""
    spec = importlib.util.find_spec(SDK_SERVICER_MODULE)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{SDK_SERVICER_MODULE} is not installed")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    last = tree.body[-1] if tree.body else None
    starts_server = (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and isinstance(last.value.func, ast.Name)
        and last.value.func.id == "main"
    )
    if not starts_server:
        raise RuntimeError(
            f"{spec.origin} no longer ends with main(): the Pulumi SDK changed; "
            "set stackOperations.providerHost to perOperation until this host is updated"
        )
    tree.body.pop()
    namespace: dict[str, Any] = {"__name__": "stacks._sdk_dynamic_host", "__file__": spec.origin}
    exec(compile(tree, spec.origin, "exec"), namespace)
    servicer = namespace.get("DynamicResourceProviderServicer")
    if not isinstance(servicer, type):
        raise RuntimeError(f"{spec.origin} has no DynamicResourceProviderServicer")
    return servicer


def _attachable(servicer: type[Any]) -> type[Any]:
    from google.protobuf import empty_pb2

    class AttachableServicer(servicer):  # type: ignore[misc]
        def Attach(self, request: Any, context: Any) -> Any:
            # The engine's address, for providers that call back into it; ours never do.
            return empty_pb2.Empty()

    return AttachableServicer


def main() -> None:
    import grpc
    from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
    from pulumi.runtime.proto import provider_pb2_grpc

    # The SDK's message-size limits, as its own host sets them.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=_THREADS), options=_GRPC_CHANNEL_OPTIONS
    )
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(
        _attachable(load_sdk_servicer())(), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    # Blocks until the driver closes our stdin or dies (the pipe closes with it).
    sys.stdin.read()
    # grpc's stop returns a threading.Event, set once the grace period's calls are done.
    server.stop(grace=1).wait(2)


if __name__ == "__main__":
    main()
