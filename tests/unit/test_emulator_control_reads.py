"""What the emulator tells its readers: the instance event feed (every launch and termination,
numbered, once) and what each AWS call cost it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from werkzeug.test import Client

from devenv.emulator import EmulatorState, eks_ami_parameter_name
from devenv.emulator.instance_events import LAUNCHED, TERMINATED, InstanceEventFeed
from devenv.emulator.server import ControlApp
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
SESSION = boto3.session.Session(region_name=REGION)
NO_RETRIES = Config(retries={"total_max_attempts": 1})
T0 = 1_900_000_000.0


def ids(page: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["event"], e["instance_id"]) for e in page["events"]]


# --- the feed itself ----------------------------------------------------------------------
def test_events_are_numbered_in_order_and_read_after_a_position() -> None:
    feed = InstanceEventFeed()
    feed.add(LAUNCHED, ["i-1", "i-2"])
    feed.add(TERMINATED, ["i-1"])
    feed.add(LAUNCHED, [])  # nothing to say: no number taken
    page = feed.after(0)
    assert [e["seq"] for e in page["events"]] == [1, 2, 3]
    assert (page["first"], page["last"]) == (1, 3)
    assert ids(feed.after(2)) == [(TERMINATED, "i-1")]
    assert feed.after(3)["events"] == []
    assert feed.after(2**62) == {"events": [], "first": 1, "last": 3}


def test_a_reader_waits_for_the_next_event_and_no_longer() -> None:
    feed = InstanceEventFeed()
    threading.Timer(0.1, feed.add, (LAUNCHED, ["i-late"])).start()
    started = time.monotonic()
    assert ids(feed.after(0, wait=5.0)) == [(LAUNCHED, "i-late")]
    assert time.monotonic() - started < 4.0, "the wait did not end at the event"
    started = time.monotonic()
    assert feed.after(1, wait=0.2)["events"] == []
    assert time.monotonic() - started >= 0.19


def test_a_reset_or_an_overflow_shows_as_a_gap_the_reader_can_see() -> None:
    feed = InstanceEventFeed(retained=3)
    feed.add(LAUNCHED, ["i-1", "i-2", "i-3", "i-4", "i-5"])
    page = feed.after(1)
    assert page["first"] == 3 > 1 + 1, "events 2 was dropped; the reader must be told"
    assert [e["seq"] for e in page["events"]] == [3, 4, 5]
    assert [e["seq"] for e in feed.after(3)["events"]] == [4, 5]
    feed.forget()
    feed.add(LAUNCHED, ["i-6"])
    page = feed.after(5)
    assert (page["first"], page["last"], ids(page)) == (6, 6, [(LAUNCHED, "i-6")])
    feed.forget()
    assert feed.after(6) == {"events": [], "first": 7, "last": 6}


# --- what EC2 calls put in it -------------------------------------------------------------
@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorState]:
    with emulator_in_process(monkeypatch, wall_clock=lambda: T0) as state:
        yield state


def run(count: int, **extra: Any) -> list[str]:
    ssm = SESSION.client("ssm", config=NO_RETRIES)
    image = ssm.get_parameter(Name=eks_ami_parameter_name("1.36", "x86_64", "nvidia"))
    launched = SESSION.client("ec2", config=NO_RETRIES).run_instances(
        ImageId=image["Parameter"]["Value"],
        InstanceType="p5.48xlarge",
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": "us-east-1a"},
        **extra,
    )
    return [i["InstanceId"] for i in launched["Instances"]]


def test_each_launch_and_each_termination_is_one_event(emulator: EmulatorState) -> None:
    start = emulator.instance_events.after(2**62)["last"]
    first, second = run(2)
    ec2 = SESSION.client("ec2", config=NO_RETRIES)
    ec2.terminate_instances(InstanceIds=[first])
    ec2.terminate_instances(InstanceIds=[first, second])  # the repeat is no second event
    assert ids(emulator.instance_events.after(start)) == [
        (LAUNCHED, first),
        (LAUNCHED, second),
        (TERMINATED, first),
        (TERMINATED, second),
    ]


def test_a_reader_of_the_feed_sees_an_ended_block_reclaimed(emulator: EmulatorState) -> None:
    """EC2 ends a Capacity Block's instances on its own; a feed reader makes no EC2 call,
    so asking the feed must move the emulator's time along as an EC2 call does."""
    block = emulator.add_capacity_reservation(
        "p5.48xlarge", "us-east-1a", 1, reservation_type="capacity-block", end=T0 + 600
    )
    (iid,) = run(
        1,
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={
            "CapacityReservationTarget": {"CapacityReservationId": block}
        },
    )
    seen = emulator.instance_events.after(2**62)["last"]
    emulator.advance_clock(600)
    app = Client(ControlApp(emulator, aws_app=lambda environ, start: []))
    answer = app.get(f"/_emulator/instance-events?after={seen}&wait=0")
    assert answer.status_code == 200
    assert ids(answer.get_json()) == [(TERMINATED, iid)]


@pytest.mark.parametrize(("query", "field"), [("after=x", "after"), ("after=0&wait=-1", "wait")])
def test_a_bad_feed_query_names_its_field(emulator: EmulatorState, query: str, field: str) -> None:
    app = Client(ControlApp(emulator, aws_app=lambda environ, start: []))
    answer = app.get(f"/_emulator/instance-events?{query}")
    assert answer.status_code == 400 and answer.get_json()["field"] == field


# --- what each AWS call costs the emulator -------------------------------------------------
def _signed(service: str, key: str = "KEY") -> str:
    return f"AWS4-HMAC-SHA256 Credential={key}/20261201/us-east-1/{service}/aws4_request, X=1"


def test_each_aws_call_is_counted_by_name_and_its_body_reaches_moto_whole(
    emulator: EmulatorState,
) -> None:
    bodies: list[bytes] = []

    def aws(environ: dict[str, Any], start: Any) -> list[bytes]:
        bodies.append(environ["wsgi.input"].read())
        start("200 OK", [])
        return [b""]

    app = Client(ControlApp(emulator, aws_app=aws))
    form = "Action=DescribeInstances&Version=2016-11-15"
    for key in ("controller", "node-simulator"):
        app.post(
            "/",
            data=form,
            content_type="application/x-www-form-urlencoded",
            headers={"Authorization": _signed("ec2", key)},
        )
    app.get("/state-bucket?list-type=2&prefix=.pulumi", headers={"Authorization": _signed("s3")})
    app.put("/state-bucket/.pulumi/stacks/p/s.json", headers={"Authorization": _signed("s3")})
    app.post(
        "/",
        data="{}",
        headers={"Authorization": _signed("kms"), "X-Amz-Target": "TrentService.Decrypt"},
    )
    assert bodies[0] == form.encode(), "the accounting ate the body moto reads"
    costs = app.get("/_emulator/requests").get_json()["requests"]
    assert {name: row["requests"] for name, row in costs.items()} == {
        "ec2:DescribeInstances": 2,
        "s3:GET bucket?list-type": 1,
        "s3:PUT object": 1,
        "kms:Decrypt": 1,
    }
    assert all(row["cpu_seconds"] >= 0 for row in costs.values())
    # Which client made each call, by the access key that signed it.
    assert costs["ec2:DescribeInstances"]["clients"] == {"controller": 1, "node-simulator": 1}
    assert costs["kms:Decrypt"]["clients"] == {"KEY": 1}
    app.post("/_emulator/reset")
    assert app.get("/_emulator/requests").get_json()["requests"] == {}
