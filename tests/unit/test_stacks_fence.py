"""The stack fence (``pulumi_driver.fence``), the S3 fence in front of the state bucket
(``pulumi_driver.s3_fence``), and the term the leader elector hands them
(``kube.leader.LeaseTerm``)."""

from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from provisioner.api.clock import FakeClock
from provisioner.api.settings import Settings
from provisioner.cloud.fencing import FENCE_FILE_VARIABLE, FencedCall, host_gate
from provisioner.cloud.s3_signing import S3RequestSigner
from provisioner.kube.leader import LeaderElector, LeaseTerm
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.errors import FENCE_CLOSED, StackError
from provisioner.pulumi_driver.fence import (
    UNFENCED,
    Fence,
    FenceClosed,
    FencedCommand,
    FencingToken,
    changes_state,
)
from provisioner.pulumi_driver.locks import pid_alive
from provisioner.pulumi_driver.s3_fence import FENCE_HEADER, S3Fence
from tests.unit.test_kube_leader import FakeLeaseStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def token(valid_until: float, transitions: int = 1) -> FencingToken:
    return FencingToken("a-1", transitions, valid_until, 0.0)


# -- the fence ------------------------------------------------------------------------------
def test_an_enforced_fence_is_closed_until_a_renewal_and_closes_at_its_deadline() -> None:
    clock = Clock()
    fence = Fence(enforced=True, clock=clock)
    with pytest.raises(FenceClosed):
        fence.check()
    fence.extend(token(valid_until=1010.0))
    assert fence.check().lease_transitions == 1
    clock.now = 1009.9
    assert fence.token() is not None
    clock.now = 1010.0  # the renew deadline, on the monotonic clock: closed without a word
    assert fence.token() is None
    with pytest.raises(FenceClosed):
        fence.check()


def test_a_check_against_another_term_is_refused() -> None:
    clock = Clock()
    fence = Fence(enforced=True, clock=clock)
    recovered_under = token(1010.0, transitions=1)
    fence.extend(token(1012.0, transitions=2))  # lost and taken again: a new term
    with pytest.raises(FenceClosed, match="changed hands"):
        fence.check(recovered_under)


def test_closing_calls_back_once_and_an_unenforced_fence_opens_again_with_unfenced() -> None:
    fence = Fence(enforced=False)
    assert fence.check() == UNFENCED
    calls: list[str] = []
    fence.on_close(calls.append)
    fence.close("stepped down")
    fence.close("again")
    assert calls == ["stepped down"]
    with pytest.raises(FenceClosed):
        fence.check()
    fence.extend(UNFENCED)
    assert fence.check() == UNFENCED


def test_the_fence_closes_itself_when_the_deadline_passes_unrenewed() -> None:
    # The elector's thread may be stuck in a request: the fence's own watch closes it.
    fence = Fence(enforced=True)
    closed = threading.Event()
    fence.on_close(lambda _: closed.set())
    fence.extend(token(time.monotonic() + 0.3))
    assert not closed.wait(0.1)
    assert closed.wait(5), "the fence did not close at its deadline"
    # Renewed again (the Lease kept), it is watched again.
    closed.clear()
    fence.extend(token(time.monotonic() + 0.3))
    assert fence.token() is not None
    assert closed.wait(5), "the fence did not close at its second deadline"


@pytest.mark.parametrize(
    ("args", "writes"),
    [
        (["up", "--yes", "--stack", "p"], True),
        (["--non-interactive", "destroy", "--remove"], True),
        (["stack", "init", "p"], True),
        (["cancel", "--yes"], True),
        (["refresh", "--yes"], True),
        (["stack", "ls", "--json"], False),
        (["stack", "export", "--stack", "p"], False),
        (["version"], False),
        (["config", "set", "aws:region", "x"], False),
    ],
)
def test_which_cli_commands_change_a_stack(args: list[str], writes: bool) -> None:
    assert changes_state(args) is writes


# -- the CLI's processes --------------------------------------------------------------------
@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    """A `pulumi` that answers `version` and otherwise starts a child and waits forever."""
    binary = tmp_path / "bin" / "pulumi"
    binary.parent.mkdir()
    pids = tmp_path / "pids"
    binary.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = version ] && echo v3.200.0 && exit 0; done\n'
        f"sleep 600 & echo $$ $! > {pids}\n"
        "wait\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def test_a_closed_fence_starts_no_state_changing_command(fake_cli: Path) -> None:
    fence = Fence(enforced=True)
    command = FencedCommand(str(fake_cli), fence)
    with pytest.raises(FenceClosed):
        command.run(["up", "--yes"], str(fake_cli), {})
    assert not (fake_cli / "pids").exists(), "the CLI was started"


def test_closing_the_fence_kills_the_cli_and_its_children(fake_cli: Path) -> None:
    fence = Fence(enforced=False)
    command = FencedCommand(str(fake_cli), fence)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            command.run(["up", "--yes"], str(fake_cli), {})
        except BaseException as err:
            failed.append(err)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 10
    while not (fake_cli / "pids").exists() or not (fake_cli / "pids").read_text().strip():
        assert time.monotonic() < deadline, "the fake CLI did not start"
        time.sleep(0.05)
    cli, child = (int(p) for p in (fake_cli / "pids").read_text().split())
    assert command.running_pids() == [cli]

    fence.close("stepped down")

    runner.join(10)
    assert not runner.is_alive()
    assert failed, "the killed CLI's command did not fail"
    deadline = time.monotonic() + 5
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(cli) and not pid_alive(child), "the CLI's process group survived"
    assert command.running_pids() == []


# -- the S3 fence ---------------------------------------------------------------------------
class Upstream:
    """A stand-in for S3 that records what reaches it."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict[str, str], bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Answers at once, as S3 does: its own answers are not held back (see the
            # fence's test of that below).
            disable_nagle_algorithm = True

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                upstream.received.append((self.command, self.path, dict(self.headers), body))
                answer = b"<ok/>" if self.command != "HEAD" else b""
                self.send_response(200)
                self.send_header("ETag", '"abc"')
                self.send_header("Content-Length", "5")
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    found = Upstream()
    yield found
    found.server.shutdown()
    found.server.server_close()


def _send(
    url: str, method: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        url,
        data=body,
        method=method,
        # Signed by the CLI with whatever it had: the fence signs again.
        headers={
            "Authorization": "AWS4-HMAC-SHA256 Credential=cli-key/x/y/s3/aws4_request",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read(), dict(refused.headers)


def _s3_fence(fence: Fence, upstream: Upstream, *, drop_copies: bool = False) -> S3Fence:
    return S3Fence(
        fence,
        upstream=upstream.url,
        signer=S3RequestSigner("us-east-1", access_key="controller-key", secret_key="secret"),
        writer="replica-a",
        drop_checkpoint_copies=drop_copies,
    )


def test_writes_pass_only_while_the_fence_is_open_and_reads_always(upstream: Upstream) -> None:
    clock = Clock()
    fence = Fence(enforced=True, clock=clock)
    s3 = _s3_fence(fence, upstream)
    key = f"{s3.endpoint_url}/state/.pulumi/stacks/proj/pool.json"
    try:
        # A standby: it reads, it writes nothing.
        assert _send(key, "GET")[0] == 200
        status, body, _ = _send(key, "PUT", b"{}")
        assert status == 503 and b"refused by the stack fence" in body
        assert _send(key, "DELETE")[0] == 503
        assert [r[0] for r in upstream.received] == ["GET"]

        fence.extend(token(clock.now + 10))
        assert _send(key, "PUT", b'{"checkpoint": 1}')[0] == 200
        # Past the renew deadline (a pause the process slept through): refused again.
        clock.now += 10
        assert _send(key, "PUT", b'{"checkpoint": 2}')[0] == 503
        assert [(r[0], r[3]) for r in upstream.received] == [
            ("GET", b""),
            ("PUT", b'{"checkpoint": 1}'),
        ]
        assert s3.refused == 3
    finally:
        s3.close()


def test_a_forwarded_write_is_signed_by_the_controller_and_names_the_writer(
    upstream: Upstream,
) -> None:
    s3 = _s3_fence(Fence(enforced=False), upstream)
    body = b'{"version": 3}'
    try:
        status, _, headers = _send(f"{s3.endpoint_url}/state/a%20b/lock.json", "PUT", body)
    finally:
        s3.close()
    assert status == 200 and headers["ETag"] == '"abc"'
    ((method, path, sent, received),) = upstream.received
    assert (method, path, received) == ("PUT", "/state/a%20b/lock.json", body)
    authorization = sent["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=controller-key/")
    assert "/us-east-1/s3/aws4_request" in authorization
    assert sent["X-Amz-Content-SHA256"] == hashlib.sha256(body).hexdigest()
    assert sent[FENCE_HEADER] == "replica-a"
    assert "atomic-gang-fence/replica-a" in sent["User-Agent"]


def test_the_clis_copy_of_a_checkpoint_is_answered_here_while_backups_are_off(
    upstream: Upstream,
) -> None:
    """Before each checkpoint write the CLI copies the checkpoint to `<stack>.json.bak`; with
    checkpoint backups off the fence answers that copy itself, after the same check as any
    write. The history's copy of the checkpoint and the checkpoint itself reach S3."""
    clock = Clock()
    fence = Fence(enforced=True, clock=clock)
    s3 = _s3_fence(fence, upstream, drop_copies=True)
    stacks = f"{s3.endpoint_url}/state/team%20a/.pulumi/stacks/proj"
    copy = {"x-amz-copy-source": "state/team%20a/.pulumi/stacks/proj/pool.json"}
    history = "/state/team%20a/.pulumi/history/proj/pool/pool-1.checkpoint.json"
    try:
        # A standby's copy is refused like every other write of its.
        assert _send(f"{stacks}/pool.json.bak", "PUT", b"", copy)[0] == 503
        fence.extend(token(clock.now + 10))
        status, body, headers = _send(f"{stacks}/pool.json.bak", "PUT", b"", copy)
        assert status == 200 and headers["Content-Type"] == "application/xml"
        assert b"<CopyObjectResult><LastModified>" in body and b"<ETag>" in body
        assert _send(f"{stacks}/pool.json.gz.bak", "PUT", b"", copy)[0] == 200
        assert _send(f"{s3.endpoint_url}{history}", "PUT", b"", copy)[0] == 200
        # A copy to a checkpoint itself would be a stack's state: it is forwarded.
        assert _send(f"{stacks}/other.json", "PUT", b"", copy)[0] == 200
        assert _send(f"{stacks}/pool.json", "PUT", b"{}")[0] == 200
        # A PUT of a `.bak` with a body is not a copy: it is written.
        assert _send(f"{stacks}/pool.json.bak", "PUT", b"{}")[0] == 200
        assert [(r[0], r[1]) for r in upstream.received] == [
            ("PUT", history),
            ("PUT", "/state/team%20a/.pulumi/stacks/proj/other.json"),
            ("PUT", "/state/team%20a/.pulumi/stacks/proj/pool.json"),
            ("PUT", "/state/team%20a/.pulumi/stacks/proj/pool.json.bak"),
        ]
        assert (s3.copies_dropped, s3.refused) == (2, 1)
    finally:
        s3.close()

    # Backups on (an operator's choice): the copy reaches S3 as the CLI sent it.
    upstream.received.clear()
    s3 = _s3_fence(Fence(enforced=False), upstream)
    try:
        assert (
            _send(f"{s3.endpoint_url}/state/.pulumi/stacks/p/s.json.bak", "PUT", b"", copy)[0]
            == 200
        )
    finally:
        s3.close()
    ((method, path, sent, _),) = upstream.received
    sent = {k.lower(): v for k, v in sent.items()}
    assert (method, path, sent["x-amz-copy-source"]) == (
        "PUT",
        "/state/.pulumi/stacks/p/s.json.bak",
        copy["x-amz-copy-source"],
    )
    assert s3.copies_dropped == 0


def test_an_answer_is_not_held_back_waiting_for_the_clients_ack(upstream: Upstream) -> None:
    """The CLI's requests go one after another on a kept-alive connection, so whatever
    holds an answer back is paid once per request: a new pool's prepare makes about 70.
    The handler writes an answer's headers, then its body; with Nagle's algorithm on the
    socket the body waited for the client to acknowledge the headers, which a client with
    nothing to send does only when its delayed-ACK timer fires (40 ms at least on Linux).
    That was most of a cold prepare on S3: 2.6 s against 0.9 s without it. Shown on the
    socket the fence answers on (TCP_NODELAY set), not by timing it."""
    s3 = _s3_fence(Fence(enforced=False), upstream)
    accepted: list[socket.socket] = []
    server = s3._server
    accept = server.get_request

    def get_request() -> tuple[socket.socket, object]:
        sock, address = accept()
        accepted.append(sock)
        return sock, address

    server.get_request = get_request  # type: ignore[method-assign]
    host, port = s3.endpoint_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/state/.pulumi/stacks/proj/pool.json")
        assert connection.getresponse().read() == b"<ok/>"
        # The connection is kept alive: the fence's end of it is still open here.
        (answered_on,) = accepted
        assert answered_on.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        connection.close()
        s3.close()


def test_a_head_answer_keeps_the_objects_length(upstream: Upstream) -> None:
    s3 = _s3_fence(Fence(enforced=False), upstream)
    try:
        status, body, headers = _send(f"{s3.endpoint_url}/state/k", "HEAD")
    finally:
        s3.close()
    assert (status, body, headers["Content-Length"]) == (200, b"", "5")


# -- the term the elector reports -----------------------------------------------------------
def test_each_renewal_reports_a_term_valid_until_its_start_plus_the_renew_deadline() -> None:
    store, clock = FakeLeaseStore(), FakeClock()
    terms: list[LeaseTerm] = []

    def elector(name: str) -> LeaderElector:
        return LeaderElector(
            store,
            name,
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
            lease_duration=15,
            renew_deadline=10,
            retry_period=2,
            clock=clock,
            on_renewed=terms.append if name == "b" else None,
        )

    a, b = elector("a"), elector("b")
    a.tick()
    started = clock.monotonic()
    b.tick()  # b sees a's record now
    clock.advance(15)
    b.tick()  # a's Lease ran out on b's clock: b takes it
    (taken,) = terms
    assert taken.holder == "b" and taken.lease_transitions == 1
    assert taken.valid_until == clock.monotonic() + 10
    # a's fence closed at the latest when its Lease ran out on b's clock.
    assert taken.others_fenced_since == started + 15
    clock.advance(2)
    b.tick()
    assert terms[-1].valid_until == clock.monotonic() + 10
    assert terms[-1].others_fenced_since == taken.others_fenced_since


def test_a_body_without_a_length_is_refused_as_s3_refuses_it(upstream: Upstream) -> None:
    s3 = _s3_fence(Fence(enforced=False), upstream)
    host, port = s3.endpoint_url.removeprefix("http://").split(":")
    # The whole chunked request in one write: the proxy answers 411 and closes as soon as it
    # has read the headers, and a client still sending its last chunk then (http.client
    # sends the terminator separately) would see a broken pipe instead of the answer.
    request = (
        b"PUT /state/k HTTP/1.1\r\nHost: s3\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    try:
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(request)
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
    finally:
        s3.close()
    assert answer.startswith(b"HTTP/1.1 411") or answer.startswith(b"HTTP/1.0 411"), answer[:80]
    assert upstream.received == []


# -- the driver -----------------------------------------------------------------------------
def _driver(fake_cli: Path, fence: Fence, backend_url: str) -> StackDriver:
    settings = Settings.model_validate(
        {
            "clusterName": "c1",
            "defaults": {"region": "eu-west-1", "nodeRoleArn": "arn:aws:iam::123456789012:role/n"},
            "pulumi": {"stateDir": str(fake_cli / "state"), "backendUrl": backend_url},
            "aws": {"endpointUrl": "http://127.0.0.1:9"},
        }
    )
    return StackDriver(settings, fake_cli, logging.getLogger("test"), fence=fence)


def test_an_enforced_driver_writes_no_stack_before_it_recovered_as_leader(fake_cli: Path) -> None:
    fence = Fence(enforced=True)
    driver = _driver(fake_cli, fence, f"file://{fake_cli / 'state'}")
    fence.extend(token(time.monotonic() + 60))
    ran: list[str] = []
    with pytest.raises(StackError) as refused:
        # The gate every operation (prepare, record, remove, destroy, refresh) passes.
        driver._run("pool-a", "record", lambda events: ran.append("body"))
    assert ran == []
    assert refused.value.reason == FENCE_CLOSED and refused.value.retryable
    assert driver.last_operation("pool-a") is None, "an operation was started"
    # Recovered as the leader, the same operation runs.
    driver.recover()
    driver._run("pool-a", "record", lambda events: ran.append("body"))
    assert ran == ["body"]


def test_the_cli_reaches_an_s3_backend_through_the_fence(fake_cli: Path) -> None:
    driver = _driver(fake_cli, Fence(enforced=False), "s3://state?region=eu-west-1")
    try:
        assert driver.s3_fence is not None
        assert driver._env["AWS_ENDPOINT_URL_S3"] == driver.s3_fence.endpoint_url
        assert driver._env["AWS_ENDPOINT_URL_S3"].startswith("http://127.0.0.1:")
    finally:
        driver.close()


def test_the_drivers_s3_fence_answers_checkpoint_copies_only_while_backups_are_off(
    fake_cli: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS", raising=False)
    monkeypatch.delenv("PULUMI_DISABLE_CHECKPOINT_BACKUPS", raising=False)
    driver = _driver(fake_cli, Fence(enforced=False), "s3://state?region=eu-west-1")
    driver.close()
    assert driver.s3_fence is not None and driver.s3_fence.drop_checkpoint_copies
    # The operator turned the CLI's backups back on: its copies are written too.
    monkeypatch.setenv("PULUMI_DISABLE_CHECKPOINT_BACKUPS", "false")
    driver = _driver(fake_cli, Fence(enforced=False), "s3://state?region=eu-west-1")
    driver.close()
    assert driver.s3_fence is not None and not driver.s3_fence.drop_checkpoint_copies


def test_the_provider_host_is_told_where_the_fence_is_and_its_gate_follows_it(
    fake_cli: Path,
) -> None:
    """Every CLI process (and the provider host, shared or its own) gets the fence file in
    its environment; the gate the host builds from it opens and closes with the fence."""
    fence = Fence(enforced=True)
    driver = _driver(fake_cli, fence, f"file://{fake_cli / 'state'}")
    try:
        gate = host_gate(dict(driver._env))
        assert gate is not None
        assert isinstance(gate("RunInstances"), FencedCall)  # before the first renewal
        fence.extend(token(time.monotonic() + 60))
        assert gate("RunInstances") is None
        fence.close("stepped down")
        assert isinstance(gate("CreateLaunchTemplate"), FencedCall)
        # Another driver on the same state directory, unfenced, opens nothing of this one's.
        other = _driver(fake_cli, Fence(enforced=False), f"file://{fake_cli / 'state'}")
        assert other._env[FENCE_FILE_VARIABLE] != driver._env[FENCE_FILE_VARIABLE]
        assert isinstance(gate("CreateLaunchTemplate"), FencedCall)
        other.close()
    finally:
        driver.close()
