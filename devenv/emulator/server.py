"""The EC2 emulator's server process: moto behind the control API.

`python -m devenv.emulator --port P [--host 127.0.0.1] [--access-log]` serves moto (with
`devenv.emulator.install()` applied) on one port, plus a control API under `/_emulator/`.
Each request is counted by `/_emulator/requests`; a line per request in the log only with
`--access-log` (writing it took 7 % of the emulator's samples in a py-spy profile of a
200-pool cold wave). Errors are logged either way.

It is served by waitress, not werkzeug's development server (what `moto_server` runs):
werkzeug's closes the connection after every answer, so each AWS call of every client paid
a new TCP connection and the server a new thread for it, where AWS's endpoints keep
connections alive. In that profile, accepting them and starting their threads took 14.5 %
of the emulator's samples. waitress keeps connections alive and answers on a fixed pool
of threads (`SERVER_THREADS`).

    GET  /_emulator/health            {"ok": true}
    GET  /_emulator/state             capacity, faults, instance counts by state, subnets
    POST /_emulator/reset             {}                                  -> state
    POST /_emulator/capacity          {az, instance_type, free}
    POST /_emulator/default-capacity  {free}
    POST /_emulator/faults            {action, code, message?, count?, status?, after?, client?}
    POST /_emulator/delays            {action, seconds, count?, after?, client?}
    GET  /_emulator/consumed          every fault and delay consumed, with the client
    DELETE /_emulator/faults          disarms every fault, delay and short answer
    POST /_emulator/short-answer      {action: CreateFleet|RunInstances, missing, count?}
    POST /_emulator/listing-lag       {seconds}
    POST /_emulator/consistency-lag   {kind, seconds, client?, share?} (`consistency`)
    POST /_emulator/eni-detach-delay  {seconds}
    POST /_emulator/eks/cluster       {name, endpoint?, certificate_authority_data?,
                                       service_ipv4_cidr?, version?, subnet_ids?,
                                       security_group_ids?, role_arn?, region?}
    POST /_emulator/eks/ami           {parameter, image_id, region?}: EKS rotates its AMI
    POST /_emulator/eks/ami-owner-alias {alias (amazon, or null for none), region?}: what
                                       DescribeImages says of the seeded EKS AMIs' alias
    POST /_emulator/ec2/public-image  {owner_id, name, region?}: another account shares a
                                       public AMI -> {image_id, owner_id}
    POST /_emulator/capacity-reservations {instance_type, availability_zone, count,
                                       reservation_type? (default|capacity-block),
                                       start?, end? (epoch seconds), match? (open|targeted),
                                       tags? {key: value}}
                                       -> {capacity_reservation_id}
    GET  /_emulator/capacity-reservations  what DescribeCapacityReservations answers
    POST /_emulator/capacity-block-offerings {instance_type, availability_zone, instances,
                                      start, duration_hours, upfront_fee}: capacity on the
                                      Capacity Block calendar (GET: what is left)
    POST /_emulator/capacity-reservation-state {reservation_id, state (a documented state,
                                       or null for the clock's), launch_error?}
    POST /_emulator/fleet-placement-answer {answer: per-override|refuse-call}
    POST /_emulator/organization/required-launch-tags {tags: [key, ...]}: the account's
                                      organization denies launches lacking them (an SCP,
                                      `organization`); [] lifts it
    GET  /_emulator/launch-requests?action=RunInstances|CreateFleet&last=N
                                       requests as received, with instance_ids and error
    GET  /_emulator/instance-events?after=N&wait=S
                                       {events: [{seq, instance_id, event}], first, last}:
                                       launches and terminations numbered above N, waiting
                                       up to S seconds (at most 30) for one
    GET  /_emulator/requests          {requests: {"ec2:DescribeInstances": {requests,
                                       cpu_seconds}, ...}}: what each AWS call cost, costliest
                                       first (see `accounting`)
    GET  /_emulator/{s3,ec2}-writes?after=N {writes: [...]}: every S3 PUT/POST/DELETE and
                                       mutating EC2 call, when, by whom (`s3_writes`, `ec2_writes`)
    GET  /_emulator/clock             {now, offset_seconds}: the clock reservations follow
    POST /_emulator/clock             {advance_seconds} moves it forward -> {now}
    GET  /_emulator/throttling        EC2's buckets (`throttling`) and the calls they refused
    POST /_emulator/throttling        {enabled?, mutating?, non_mutating?, resources?} sizes

A request the control API cannot use answers 400 with {"error": ..., "field": ...}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Final

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from devenv.emulator import control_fields as fields
from devenv.emulator.access_log import ACCESS_LOG, AccessLog
from devenv.emulator.accounting import RequestAccounting
from devenv.emulator.client import CONTROL_PREFIX, DEFAULT_HOST
from devenv.emulator.ec2_writes import Ec2WriteLog
from devenv.emulator.install import install
from devenv.emulator.model import (
    DEFAULT_CLUSTER_VERSION,
    DEFAULT_REGION,
    DEFAULT_SERVICE_CIDR,
    ClusterSpec,
    EmulatorInputError,
)
from devenv.emulator.offering_control import add_offering
from devenv.emulator.organization import checked_keys
from devenv.emulator.s3_writes import S3WriteLog
from devenv.emulator.state import EmulatorState
from devenv.emulator.throttling import throttling_from_body

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_OFFERINGS: Final = "/_emulator/capacity-block-offerings"


class ControlApp:
    """Answers `/_emulator/...` itself and hands every other request to moto."""

    def __init__(self, state: EmulatorState, aws_app: WSGIApp) -> None:
        self._state = state
        self._aws_app = aws_app
        self._accounting = RequestAccounting()
        self._s3_writes = S3WriteLog()
        self._ec2_writes = Ec2WriteLog()
        self._routes = Map(
            [
                Rule("/_emulator/health", methods=["GET"], endpoint="health"),
                Rule("/_emulator/state", methods=["GET"], endpoint="state"),
                Rule("/_emulator/reset", methods=["POST"], endpoint="reset"),
                Rule("/_emulator/capacity", methods=["POST"], endpoint="capacity"),
                Rule("/_emulator/default-capacity", methods=["POST"], endpoint="default_capacity"),
                Rule("/_emulator/faults", methods=["POST"], endpoint="faults"),
                Rule("/_emulator/faults", methods=["DELETE"], endpoint="clear_faults"),
                Rule("/_emulator/delays", methods=["POST"], endpoint="delays"),
                Rule("/_emulator/consumed", methods=["GET"], endpoint="consumed"),
                Rule("/_emulator/short-answer", methods=["POST"], endpoint="short_answer"),
                Rule("/_emulator/listing-lag", methods=["POST"], endpoint="listing_lag"),
                Rule("/_emulator/consistency-lag", methods=["POST"], endpoint="consistency_lag"),
                Rule("/_emulator/instance-history", methods=["GET"], endpoint="instance_history"),
                Rule("/_emulator/eni-detach-delay", methods=["POST"], endpoint="eni_detach_delay"),
                Rule("/_emulator/eks/cluster", methods=["POST"], endpoint="eks_cluster"),
                Rule("/_emulator/eks/ami", methods=["POST"], endpoint="eks_ami"),
                Rule("/_emulator/ec2/public-image", methods=["POST"], endpoint="public_image"),
                Rule("/_emulator/eks/ami-owner-alias", methods=["POST"], endpoint="eks_ami_alias"),
                Rule(
                    "/_emulator/capacity-reservations", methods=["POST"], endpoint="add_reservation"
                ),
                Rule("/_emulator/capacity-reservations", methods=["GET"], endpoint="reservations"),
                Rule(f"{_OFFERINGS}", methods=["POST"], endpoint="add_offering"),
                Rule(f"{_OFFERINGS}", methods=["GET"], endpoint="offerings"),
                Rule(
                    "/_emulator/capacity-reservation-state",
                    methods=["POST"],
                    endpoint="reservation_state",
                ),
                Rule(
                    "/_emulator/fleet-placement-answer",
                    methods=["POST"],
                    endpoint="fleet_placement_answer",
                ),
                Rule(
                    "/_emulator/organization/required-launch-tags",
                    methods=["POST"],
                    endpoint="required_launch_tags",
                ),
                Rule(
                    "/_emulator/dry-run-validation", methods=["POST"], endpoint="dry_run_validation"
                ),
                Rule("/_emulator/launch-requests", methods=["GET"], endpoint="launch_requests"),
                Rule("/_emulator/instance-events", methods=["GET"], endpoint="instance_events"),
                Rule("/_emulator/requests", methods=["GET"], endpoint="requests"),
                Rule("/_emulator/s3-writes", methods=["GET"], endpoint="s3_writes"),
                Rule("/_emulator/ec2-writes", methods=["GET"], endpoint="ec2_writes"),
                Rule("/_emulator/clock", methods=["GET"], endpoint="clock"),
                Rule("/_emulator/clock", methods=["POST"], endpoint="advance_clock"),
                Rule("/_emulator/throttling", methods=["GET"], endpoint="throttling"),
                Rule("/_emulator/throttling", methods=["POST"], endpoint="set_throttling"),
            ]
        )
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "health": lambda _: {"ok": True},
            "state": lambda _: self._state.snapshot(),
            "reset": self._reset,
            "capacity": self._capacity,
            "default_capacity": self._default_capacity,
            "faults": self._faults,
            "clear_faults": self._clear_faults,
            "delays": self._delays,
            "consumed": self._consumed,
            "short_answer": self._short_answer,
            "listing_lag": self._listing_lag,
            "consistency_lag": self._consistency_lag,
            "instance_history": lambda _: {"instances": state.instance_history()},
            "eni_detach_delay": self._eni_detach_delay,
            "eks_cluster": self._eks_cluster,
            "eks_ami": self._eks_ami,
            "public_image": self._public_image,
            "eks_ami_alias": self._eks_ami_alias,
            "add_reservation": self._add_reservation,
            "reservation_state": self._reservation_state,
            "add_offering": lambda body: add_offering(state, body),
            "offerings": lambda _: {"calendar": state.capacity_block_calendar()},
            "fleet_placement_answer": self._fleet_placement_answer,
            "required_launch_tags": self._required_launch_tags,
            "reservations": lambda _: {"capacity_reservations": state.capacity_reservation_views()},
            "dry_run_validation": self._dry_run_validation,
            "launch_requests": self._launch_requests,
            "instance_events": self._instance_events,
            "requests": lambda _: {"requests": self._accounting.report()},
            "throttling": lambda _: state.throttling_report(),
            "set_throttling": lambda body: throttling_from_body(state, body),
            "s3_writes": lambda query: {"writes": self._s3_writes.report(fields.after(query))},
            "ec2_writes": lambda query: {"writes": self._ec2_writes.report(fields.after(query))},
            "clock": lambda _: {"now": state.now(), "offset_seconds": state.clock_offset},
            "advance_clock": self._advance_clock,
        }

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if not str(environ.get("PATH_INFO", "")).startswith(CONTROL_PREFIX):
            return self._ec2_writes.wrap(self._logged, environ, start_response)
        response = self._answer(Request(environ))
        return response(environ, start_response)

    def _answer(self, request: Request) -> Response:
        try:
            endpoint, _ = self._routes.bind_to_environ(request.environ).match()
            # GET endpoints take their few arguments from the query string.
            body = fields.json_body(request) if request.method == "POST" else dict(request.args)
            return _json(200, self._handlers[str(endpoint)](body))
        except (fields.BadField, EmulatorInputError) as bad:
            return _json(400, {"error": bad.message, "field": bad.field})
        except (NotFound, MethodNotAllowed) as missing:
            return _json(missing.code or 404, {"error": missing.description, "field": None})
        except HTTPException as other:
            return _json(other.code or 500, {"error": other.description, "field": None})

    def _timed(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        return self._accounting.timed(self._aws_app, environ, start_response)

    def _logged(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        return self._s3_writes.wrap(self._timed, environ, start_response)

    def _reset(self, _: dict[str, Any]) -> Any:
        self._state.reset()
        self._accounting.clear()
        self._s3_writes.clear()
        self._ec2_writes.clear()
        return self._state.snapshot()

    def _capacity(self, body: dict[str, Any]) -> Any:
        az, instance_type = fields.string(body, "az"), fields.string(body, "instance_type")
        self._state.set_capacity(az, instance_type, fields.integer(body, "free"))
        return {"az": az, "instance_type": instance_type, "free": fields.integer(body, "free")}

    def _default_capacity(self, body: dict[str, Any]) -> Any:
        self._state.set_default_free(fields.integer(body, "free"))
        return {"default_free": self._state.default_free}

    def _faults(self, body: dict[str, Any]) -> Any:
        fault = self._state.inject_fault(
            fields.string(body, "action"),
            fields.string(body, "code"),
            message=fields.opt_string(body, "message"),
            count=fields.integer(body, "count", default=1),
            status=fields.opt_integer(body, "status"),
            after=bool(body.get("after", False)),
            client=fields.opt_string(body, "client"),
        )
        return fault.as_dict()

    def _delays(self, body: dict[str, Any]) -> Any:
        seconds = body.get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise EmulatorInputError("seconds", "seconds must be a number")
        delay = self._state.delay_calls(
            fields.string(body, "action"),
            float(seconds),
            count=fields.integer(body, "count", default=1),
            after=bool(body.get("after", False)),
            client=fields.opt_string(body, "client"),
        )
        return delay.as_dict()

    def _consumed(self, _: dict[str, Any]) -> Any:
        return {"consumed": self._state.consumed()}

    def _clear_faults(self, _: dict[str, Any]) -> Any:
        self._state.clear_faults()
        return {"faults": []}

    def _short_answer(self, body: dict[str, Any]) -> Any:
        action = body.get("action")
        if not isinstance(action, str):
            raise fields.BadField("action", "action must be CreateFleet or RunInstances")
        missing, count = fields.integer(body, "missing"), fields.integer(body, "count", default=1)
        self._state.set_short_answer(action, missing, count)
        return {"action": action, "missing": missing, "count": count}

    def _listing_lag(self, body: dict[str, Any]) -> Any:
        seconds = body.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise fields.BadField("seconds", "seconds must be a number")
        self._state.set_listing_lag(float(seconds))
        return {"seconds": float(seconds)}

    def _consistency_lag(self, body: dict[str, Any]) -> Any:
        seconds = fields.number(body, "seconds")
        if seconds is None:
            raise fields.BadField("seconds", "seconds is required (0 disarms)")
        share = fields.number(body, "share")
        lag = self._state.set_lag(
            fields.string(body, "kind"),
            seconds,
            fields.opt_string(body, "client"),
            1.0 if share is None else share,
        )
        return {"lag": None if lag is None else lag.as_dict()}

    def _eni_detach_delay(self, body: dict[str, Any]) -> Any:
        seconds = body.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise fields.BadField("seconds", "seconds must be a number")
        self._state.set_eni_detach_delay(float(seconds))
        return {"seconds": float(seconds)}

    def _eks_cluster(self, body: dict[str, Any]) -> Any:
        spec = ClusterSpec(
            name=fields.string(body, "name"),
            endpoint=fields.opt_string(body, "endpoint"),
            certificate_authority_data=fields.opt_string(body, "certificate_authority_data"),
            service_ipv4_cidr=fields.opt_string(body, "service_ipv4_cidr") or DEFAULT_SERVICE_CIDR,
            version=fields.opt_string(body, "version") or DEFAULT_CLUSTER_VERSION,
            subnet_ids=fields.string_list(body, "subnet_ids"),
            security_group_ids=fields.string_list(body, "security_group_ids"),
            role_arn=fields.opt_string(body, "role_arn"),
            region=fields.opt_string(body, "region") or DEFAULT_REGION,
        )
        return self._state.register_eks_cluster(spec)

    def _eks_ami(self, body: dict[str, Any]) -> Any:
        region = fields.opt_string(body, "region") or DEFAULT_REGION
        return self._state.publish_eks_ami(
            fields.string(body, "parameter"), fields.string(body, "image_id"), region
        )

    def _eks_ami_alias(self, body: dict[str, Any]) -> Any:
        region = fields.opt_string(body, "region") or DEFAULT_REGION
        return self._state.set_eks_ami_owner_alias(fields.opt_string(body, "alias"), region)

    def _public_image(self, body: dict[str, Any]) -> Any:
        region = fields.opt_string(body, "region") or DEFAULT_REGION
        return self._state.share_public_ami(
            fields.string(body, "owner_id"), fields.string(body, "name"), region
        )

    def _add_reservation(self, body: dict[str, Any]) -> Any:
        made = self._state.add_capacity_reservation(
            fields.string(body, "instance_type"),
            fields.string(body, "availability_zone"),
            fields.integer(body, "count"),
            reservation_type=fields.opt_string(body, "reservation_type") or "default",
            start=fields.number(body, "start"),
            end=fields.number(body, "end"),
            match=fields.opt_string(body, "match") or "targeted",
            tags=fields.string_map(body, "tags"),
        )
        return {"capacity_reservation_id": made}

    def _reservation_state(self, body: dict[str, Any]) -> Any:
        self._state.force_reservation_state(
            fields.string(body, "reservation_id"),
            fields.opt_string(body, "state"),
            fields.opt_string(body, "launch_error"),
        )
        return {"ok": True}

    def _fleet_placement_answer(self, body: dict[str, Any]) -> Any:
        self._state.set_fleet_placement_answer(fields.string(body, "answer"))
        return {"ok": True}

    def _required_launch_tags(self, body: dict[str, Any]) -> Any:
        keys = checked_keys(body.get("tags"))
        with self._state.lock:
            self._state.require_launch_tags(keys)
        return {"ok": True, "tags": keys}

    def _dry_run_validation(self, body: dict[str, Any]) -> Any:
        on = body.get("on")
        if not isinstance(on, bool):
            raise fields.BadField("on", "on is required and must be true or false")
        self._state.set_dry_run_validation(on)
        return {"ok": True, "on": on}

    def _launch_requests(self, query: dict[str, Any]) -> Any:
        last = query.get("last")
        if last is not None and not str(last).isdigit():
            raise fields.BadField("last", "last must be a positive integer")
        found = self._state.launch_requests(
            fields.opt_string(query, "action"), int(last) if last is not None else None
        )
        return {"launch_requests": found}

    def _instance_events(self, query: dict[str, Any]) -> Any:
        after, wait = fields.query_number(query, "after"), fields.query_number(query, "wait")
        self._state.tick()
        return self._state.instance_events.after(int(after or 0), wait or 0.0)

    def _advance_clock(self, body: dict[str, Any]) -> Any:
        seconds = fields.number(body, "advance_seconds")
        if seconds is None:
            raise fields.BadField("advance_seconds", "advance_seconds is required")
        return {"now": self._state.advance_clock(seconds)}


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), status=status, mimetype="application/json")


# --- the server process ------------------------------------------------------------------
def build_app(state: EmulatorState) -> ControlApp:
    """moto's server app (the same one `moto_server` runs) behind the control API."""
    from moto import backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    # moto's dispatcher lists its own package directory on every request to learn whether
    # the host names a service; that was a seventh of the emulator's CPU under a benchmark.
    # The package does not change while the server runs.
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules  # type: ignore[assignment]

    return ControlApp(state, DomainDispatcherApplication(create_backend_app))


# Threads answering requests. Every answer is worked out in this one Python process (all
# but S3's object calls under the emulator's one lock), so more threads add no speed; they
# keep a long poll of the instance feed (up to 30 s) or a call told to be slow from holding
# up every other client's answer.
SERVER_THREADS: Final = 24
# Open connections, idle ones included: every botocore pool, Pulumi CLI and provider host.
SERVER_CONNECTION_LIMIT: Final = 1000
# An idle connection is closed after this long. Longer than the clients' own idle timeouts
# (Go's 90 s): a close from this side can cross a request being sent on the connection.
SERVER_IDLE_SECONDS: Final = 600


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="moto, extended into the project's EC2 emulator")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    parser.add_argument(
        "--access-log", action="store_true", help="log a line per request (off: only errors)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )

    from waitress.server import create_server

    state = install()
    state.reset()
    app: Callable[..., Any] = build_app(state)
    if args.access_log:
        app = AccessLog(app)
        logging.getLogger(ACCESS_LOG).setLevel(logging.INFO)
    server = create_server(
        app,
        host=args.host,
        port=args.port,
        threads=SERVER_THREADS,
        connection_limit=SERVER_CONNECTION_LIMIT,
        channel_timeout=SERVER_IDLE_SECONDS,
        ident="atomic-gang-ec2-emulator",
    )
    port = int(server.effective_port)
    # moto builds some URLs (S3, presigned) from this; keep it truthful.
    os.environ["MOTO_PORT"] = str(port)
    if args.port_file:
        _write_atomically(args.port_file, str(port))
    signal.signal(signal.SIGTERM, _exit_on_signal)
    print(f"EC2 emulator listening on http://{args.host}:{port}", flush=True)
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.close()
    return 0


def _write_atomically(path: Path, text: str) -> None:
    # The parent polls for the file; it must never read a half-written one.
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(text)
    partial.replace(path)
