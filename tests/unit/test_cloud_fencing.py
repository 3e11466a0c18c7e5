"""Fenced AWS clients (``cloud.fencing``): a closed fence refuses every mutating call the
engine or a stack provider makes, before anything is sent; reads always pass; the
controller's refusal passes through the engine's error handling as `NotLeader`, the
provider host's is an ordinary error; the fence file follows the fence."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from provisioner.api.fencing import NotLeader
from provisioner.cloud import release
from provisioner.cloud.ec2api import Ec2Api, IamApi
from provisioner.cloud.fencing import (
    FENCE_FILE_VARIABLE,
    FencedCall,
    FenceFile,
    fence_client,
    file_gate,
    host_gate,
    is_read_only,
    leader_gate,
)
from provisioner.pulumi_driver.fence import Fence, FencingToken

# One session: it keeps the service models loaded, which each client would read again.
_SESSION = boto3.session.Session(
    aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
)


class Wire:
    """Stands where the network would be: records each attempt that left, answers it."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.sent: list[str] = []
        self._statuses = statuses or []
        self.on_send: Callable[[], None] = lambda: None

    def __call__(self, request: Any, event_name: str, **_: Any) -> AWSResponse:
        name = event_name.rpartition(".")[2]
        self.sent.append(name)
        self.on_send()
        status = self._statuses.pop(0) if self._statuses else 200
        # EC2's answers have no result element; IAM's are wrapped in <ActionResult>.
        body = f"<Response><{name}Result/></Response>"
        if status != 200:
            body = "<Response><Errors><Error><Code>InternalError</Code></Error></Errors></Response>"
        return AWSResponse(request.url, status, {}, _Raw(body.encode()))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def fenced(service: str, is_open: Callable[[], bool], wire: Wire, attempts: int = 1) -> Any:
    client = _SESSION.client(
        service,
        endpoint_url="http://127.0.0.1:9",  # never reached: the wire answers
        config=Config(
            parameter_validation=False,
            retries={"mode": "standard", "total_max_attempts": attempts},
        ),
    )
    client.meta.events.register("before-send", wire)
    return fence_client(client, leader_gate(is_open))


def methods(protocol: type) -> list[str]:
    return [n for n, _ in inspect.getmembers(protocol, inspect.isfunction) if n[0] != "_"]


def action(client: Any, method: str) -> str:
    return str(client.meta.method_to_api_mapping[method])


EC2_METHODS = methods(Ec2Api)


def test_the_engine_protocols_hold_both_reads_and_writes() -> None:
    """The table below covers something: the surface has writes to refuse."""
    client = fenced("ec2", lambda: True, Wire())
    writes = [m for m in EC2_METHODS if not is_read_only(action(client, m))]
    assert {"run_instances", "create_fleet", "terminate_instances", "create_tags"} <= set(writes)
    assert {"create_launch_template", "delete_launch_template", "delete_placement_group"} <= set(
        writes
    )
    assert "describe_instances" not in writes


@pytest.mark.parametrize("method", EC2_METHODS)
def test_a_closed_fence_refuses_every_mutating_ec2_call_and_passes_every_read(
    method: str,
) -> None:
    wire = Wire()
    client = fenced("ec2", lambda: False, wire)
    name = action(client, method)
    if is_read_only(name):
        getattr(client, method)()
        assert wire.sent == [name]
    else:
        with pytest.raises(NotLeader, match=name):
            getattr(client, method)()
        assert wire.sent == []


@pytest.mark.parametrize("method", EC2_METHODS)
def test_an_open_fence_sends_every_call(method: str) -> None:
    wire = Wire()
    client = fenced("ec2", lambda: True, wire)
    getattr(client, method)()
    assert wire.sent == [action(client, method)]


def test_every_write_ec2_offers_is_refused_not_only_the_ones_used_today() -> None:
    """A call added tomorrow is a write until its name says it reads."""
    client = fenced("ec2", lambda: False, Wire())
    ops = client.meta.service_model.operation_names
    writes = [op for op in ops if not is_read_only(op)]
    assert "CreatePlacementGroup" in writes and "ModifyInstanceAttribute" in writes
    assert all(op.startswith(("Describe", "Get", "List")) for op in ops if op not in writes)


def test_iam_writes_are_refused_too() -> None:
    wire = Wire()
    client = fenced("iam", lambda: False, wire)
    with pytest.raises(NotLeader):
        client.create_instance_profile(InstanceProfileName="p")
    for method in methods(IamApi):
        getattr(client, method)()
    assert wire.sent == ["GetInstanceProfile"]


def test_a_retry_after_the_fence_closed_is_not_sent() -> None:
    """The gate runs before each attempt botocore makes, not once per call."""
    state = {"open": True}
    wire = Wire(statuses=[500, 200])
    wire.on_send = lambda: state.update(open=False)  # the Lease is lost meanwhile
    client = fenced("ec2", lambda: state["open"], wire, attempts=3)
    with pytest.raises(NotLeader):
        client.terminate_instances(InstanceIds=["i-1"])
    assert wire.sent == ["TerminateInstances"]


def test_the_refusal_passes_through_the_engines_error_handling() -> None:
    """The engine turns every Exception of a call into a CloudError; `NotLeader` is none,
    so a pass cannot retry it or write it to a status as a failure."""
    client = fenced("ec2", lambda: False, Wire())
    with pytest.raises(NotLeader):
        release.terminate(client, ["i-1", "i-2"])


def test_the_controllers_gate_follows_the_stack_drivers_fence() -> None:
    now = [100.0]
    fence = Fence(enforced=True, clock=lambda: now[0])
    wire = Wire()
    client = fenced("ec2", lambda: fence.token() is not None, wire)
    with pytest.raises(NotLeader):  # before the first renewal
        client.create_tags(Resources=["i-1"], Tags=[])
    fence.extend(FencingToken("a", 1, valid_until=110.0, others_fenced_since=0.0))
    client.create_tags(Resources=["i-1"], Tags=[])
    now[0] = 110.0  # the renew deadline passed unrenewed (a process resumed after SIGSTOP)
    with pytest.raises(NotLeader):
        client.create_tags(Resources=["i-1"], Tags=[])
    assert wire.sent == ["CreateTags"]


# -- the provider host's side ---------------------------------------------------------------
def test_the_fence_file_follows_the_fence(tmp_path: Path) -> None:
    now = [100.0]
    file = FenceFile(tmp_path / "fence", clock=lambda: now[0])
    fence = Fence(enforced=True, clock=lambda: now[0])
    fence.publish_to(file)
    assert file.valid_until() is None and not file.is_open()
    fence.extend(FencingToken("a", 1, valid_until=110.0, others_fenced_since=0.0))
    assert file.valid_until() == 110.0 and file.is_open()
    now[0] = 110.0  # nobody writes "closed" while the controller is paused: the clock does
    assert not file.is_open()
    now[0] = 100.0
    fence.close("stepped down")
    assert not file.is_open()


def test_an_unenforced_fence_publishes_an_open_file(tmp_path: Path) -> None:
    file = FenceFile(tmp_path / "fence")
    Fence(enforced=False).publish_to(file)
    assert file.is_open() and file.valid_until() == float("inf")


@pytest.mark.parametrize("content", [None, "", "garbage", "nan", "closed"])
def test_a_missing_or_unreadable_fence_file_reads_closed(
    tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "fence"
    if content is not None:
        path.write_text(content)
    assert not FenceFile(path).is_open()


def test_the_provider_hosts_gate_refuses_with_an_ordinary_error(tmp_path: Path) -> None:
    """Inside the provider host the refusal is a failed provider call (the SDK's servicer
    reports an Exception to the engine), not a BaseException that would escape gRPC."""
    path = tmp_path / "fence"
    gate = host_gate({FENCE_FILE_VARIABLE: str(path)})
    assert gate is not None and host_gate({}) is None
    wire = Wire()
    client = fence_client(fenced("ec2", lambda: True, wire), gate)
    FenceFile(path).publish(None)
    with pytest.raises(FencedCall, match="CreateLaunchTemplate"):
        client.create_launch_template(LaunchTemplateName="lt")
    client.describe_launch_templates()
    assert wire.sent == ["DescribeLaunchTemplates"]
    assert isinstance(file_gate(FenceFile(path))("RunInstances"), Exception)
