"""The shared provider host: what it takes from the pinned Pulumi SDK, and its life as a
child of the driver (started on first use, restarted when found dead, gone with its stdin).

``stacks.provider_server`` loads the SDK's dynamic-provider servicer from
``pulumi.dynamic.__main__`` without the module's closing ``main()`` and adds ``Attach``. If
an SDK upgrade moves either, these fail here, naming the module, before any engine run
meets a host that cannot serve it. The end-to-end proof (real CLI, engines attached, no
per-run host started) is ``tests/integration/test_stack_cli_processes.py``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version

import grpc
import pytest
from google.protobuf import empty_pb2
from pulumi.runtime.proto import plugin_pb2, provider_pb2_grpc

from provisioner.pulumi_driver.errors import PROVIDER_HOST_UNAVAILABLE, StackError
from provisioner.pulumi_driver.provider_host import ATTACH_VARIABLE, SharedProviderHost
from provisioner.pulumi_driver.sdk import SDK_VERSION
from stacks.provider_server import load_sdk_servicer

pytestmark = pytest.mark.unit

# What the engine calls on a dynamic provider during an `up` and a `destroy`.
ENGINE_CALLS = ("Configure", "CheckConfig", "DiffConfig", "Check", "Diff", "Create", "Read")
ENGINE_CALLS += ("Update", "Delete", "GetPluginInfo")


def test_the_sdk_servicer_loads_without_starting_a_server() -> None:
    assert version("pulumi") == SDK_VERSION, "re-check stacks.provider_server on this SDK"
    servicer = load_sdk_servicer()
    missing = [name for name in ENGINE_CALLS if not callable(getattr(servicer, name, None))]
    assert missing == []


def _port(host: SharedProviderHost) -> int:
    return int(host.attach_environment()[ATTACH_VARIABLE].removeprefix("pulumi-python:"))


def _answers(port: int) -> tuple[str, bool]:
    """The host's plugin version and whether it accepts the engine's Attach."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = provider_pb2_grpc.ResourceProviderStub(channel)
        info = stub.GetPluginInfo(empty_pb2.Empty(), timeout=30)
        attached = stub.Attach(plugin_pb2.PluginAttach(address="127.0.0.1:1"), timeout=30)
        return info.version, isinstance(attached, empty_pb2.Empty)


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_the_host_serves_the_engine_and_is_restarted_when_it_dies() -> None:
    host = SharedProviderHost({}, logging.getLogger("host"))
    try:
        port = _port(host)
        assert _answers(port) == ("0.1.0", True)
        assert _port(host) == port and host.starts == 1  # one host for every operation
        first = host.pid
        assert first is not None

        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while host.pid is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert host.pid is None
        restarted = _port(host)
        assert host.starts == 2 and host.pid not in (None, first)
        assert _answers(restarted)[1]
    finally:
        host.close()


def test_the_host_does_not_outlive_the_controller_that_started_it() -> None:
    # A controller killed outright runs no cleanup: the host sees its stdin close.
    code = (
        "import logging, sys, time\n"
        "from provisioner.pulumi_driver.provider_host import SharedProviderHost\n"
        "host = SharedProviderHost({}, logging.getLogger('h'))\n"
        "host.attach_environment()\n"
        "print(host.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    ) as controller:
        try:
            assert controller.stdout is not None
            host_pid = int(controller.stdout.readline())
            assert not _gone(host_pid, 0.5)
        finally:
            controller.kill()
    assert _gone(host_pid, 10), "the provider host outlived its controller"


def test_a_host_that_cannot_start_names_the_setting_that_avoids_it() -> None:
    # An interpreter without the SDK: the module does not import, no port is announced.
    host = SharedProviderHost({"PYTHONPATH": "", "PYTHONNOUSERSITE": "1"}, logging.getLogger("h"))
    host._argv = lambda: ["/bin/sh", "-c", "echo no such module >&2; exit 1"]  # type: ignore[method-assign]
    with pytest.raises(StackError) as caught:
        host.attach_environment()
    assert caught.value.reason == PROVIDER_HOST_UNAVAILABLE
    assert "stackOperations.providerHost" in str(caught.value)
    assert "no such module" in str(caught.value)


def test_the_host_exits_cleanly_when_its_stdin_closes() -> None:
    """The driver closes the host's stdin to stop it: the host stops its server and exits
    0, with nothing on stderr (its stop once died on `Event.add_done_callback`)."""
    with subprocess.Popen(
        [sys.executable, "-u", "-m", "stacks.provider_server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as host:
        assert host.stdout is not None and host.stdin is not None
        port = int(host.stdout.readline())
        assert _answers(port)[1]
        host.stdin.close()
        code = host.wait(timeout=30)
        assert host.stderr is not None
        stderr = host.stderr.read()
    assert (code, stderr) == (0, "")
