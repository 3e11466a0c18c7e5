"""The emulator as a child process (`EmulatorProcess`) and its control API's HTTP client.

Who calls what: the integration fixtures and the demo start `EmulatorProcess` (a child
process through `devenv.processes.Supervised`, so nothing outlives the test
run) and steer it with `EmulatorClient`; boto3 clients reach it with `endpoint_url`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from devenv.processes import ProcessFailed, Supervised, python_env

CONTROL_PREFIX: Final = "/_emulator/"
DEFAULT_HOST: Final = "127.0.0.1"


# The bound on one control call (a reset, a fault switch, a state read), stated once for every
# fixture and test: a reset of the emulator's backends takes well under a second on a quiet
# machine and was seen past ten on two cores shared with a cold build and three test workers.
# A call that takes longer than this is a hung emulator, not a busy one.
CONTROL_CALL_SECONDS = 60.0


# --- the child process handle ------------------------------------------------------------
class EmulatorProcess:
    """Runs the emulator in its own process on a free 127.0.0.1 port, logging to `log_dir`
    (with ``access_log``, a line per request there too: `log_path`)."""

    def __init__(
        self,
        log_dir: Path,
        *,
        host: str = DEFAULT_HOST,
        name: str = "ec2-emulator",
        startup_timeout: float = 60.0,
        access_log: bool = False,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.access_log = access_log
        self.host = host
        self.name = name
        self.startup_timeout = startup_timeout
        self.log_path = self.log_dir / f"{name}.log"
        self._port_file = self.log_dir / f"{name}.port"
        self._child: Supervised | None = None
        self._port: int | None = None

    def start(self) -> EmulatorProcess:
        if self._child is not None:
            return self
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._port_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "devenv.emulator", "--host", self.host]
        argv += ["--port", "0", "--port-file", str(self._port_file)]
        if self.access_log:
            argv.append("--access-log")
        env = python_env({"PYTHONUNBUFFERED": "1"})
        self._child = Supervised(self.name, argv, self.log_path, env=env)
        try:
            self._child.wait_ready(self._port_file.exists, self.startup_timeout, "binding a port")
            self._port = int(self._port_file.read_text())
            self._child.wait_ready(self.client.health, self.startup_timeout, "answering health")
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def endpoint_url(self) -> str:
        if self._port is None:
            raise ProcessFailed(f"{self.name} is not running; call start() first")
        return f"http://{self.host}:{self._port}"

    @property
    def client(self) -> EmulatorClient:
        return EmulatorClient(self.endpoint_url)

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def alive(self) -> bool:
        return self._child is not None and self._child.alive()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; safe to call twice."""
        child, self._child, self._port = self._child, None, None
        if child is not None:
            child.stop(grace=5.0)

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- the HTTP client ---------------------------------------------------------------------
class EmulatorControlError(RuntimeError):
    """The control API refused a request; `field` names the offending field, if any."""

    def __init__(self, status: int, message: str, field: str | None) -> None:
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.message = message
        self.field = field


class EmulatorClient:
    """The control API, one method per endpoint."""

    def __init__(self, endpoint_url: str, timeout: float = CONTROL_CALL_SECONDS) -> None:
        self.endpoint_url = endpoint_url.rstrip("/")
        self.timeout = timeout

    def health(self) -> bool:
        return bool(self._call("GET", "health").get("ok"))

    def state(self) -> dict[str, Any]:
        return self._call("GET", "state")

    def reset(self) -> dict[str, Any]:
        return self._call("POST", "reset", {})

    def set_capacity(self, az: str, instance_type: str, free: int) -> dict[str, Any]:
        return self._call(
            "POST", "capacity", {"az": az, "instance_type": instance_type, "free": free}
        )

    def set_default_capacity(self, free: int) -> dict[str, Any]:
        return self._call("POST", "default-capacity", {"free": free})

    def inject_fault(
        self,
        action: str,
        code: str,
        message: str | None = None,
        count: int = 1,
        status: int | None = None,
        after: bool = False,
        client: str | None = None,
    ) -> dict[str, Any]:
        """`after`: EC2 runs the call, then the answer is lost (a 5xx after the side
        effect). `client`: only calls signed with this access key id consume it."""
        body = {
            "action": action,
            "code": code,
            "message": message,
            "count": count,
            "status": status,
            "after": after,
            "client": client,
        }
        return self._call("POST", "faults", body)

    def delay_calls(
        self,
        action: str,
        seconds: float,
        count: int = 1,
        after: bool = False,
        client: str | None = None,
    ) -> dict[str, Any]:
        """Hold the next `count` calls of `action` `seconds` before EC2 runs them (or,
        with `after`, after it ran them and before answering)."""
        body = {
            "action": action,
            "seconds": seconds,
            "count": count,
            "after": after,
            "client": client,
        }
        return self._call("POST", "delays", body)

    def consumed(self) -> list[dict[str, Any]]:
        """Every fault and delay consumed so far, with the access key that consumed it."""
        return list(self._call("GET", "consumed")["consumed"])

    def clear_faults(self) -> dict[str, Any]:
        return self._call("DELETE", "faults")

    def set_short_answer(self, action: str, missing: int, count: int = 1) -> dict[str, Any]:
        """The next `count` calls of `action` (CreateFleet or RunInstances) launch `missing`
        fewer instances than asked and answer success (0 disarms)."""
        body = {"action": action, "missing": missing, "count": count}
        return self._call("POST", "short-answer", body)

    def set_listing_lag(self, seconds: float) -> dict[str, Any]:
        """Instances launched from now on stay out of DescribeInstances listings for
        `seconds` (EC2's eventually consistent reads); 0 disarms."""
        return self._call("POST", "listing-lag", {"seconds": seconds})

    def set_consistency_lag(
        self, kind: str, seconds: float, client: str | None = None, share: float = 1.0
    ) -> dict[str, Any]:
        """EC2's eventual consistency for `client` (its access key id; None: everyone), for
        `seconds` after each launch: kind "listing" (listings miss the last `share` of each
        fresh set), "describe-by-id" (NotFound by id), "terminate" (TerminateInstances
        answers NotFound and terminates nothing), "reservation-listing" (for `seconds`
        after a PurchaseCapacityBlock took effect, DescribeCapacityReservations without ids
        leaves the new block out). 0 disarms."""
        body = {"kind": kind, "seconds": seconds, "client": client, "share": share}
        return self._call("POST", "consistency-lag", body)

    def set_reservation_listing_lag(
        self, seconds: float, client: str | None = None
    ) -> dict[str, Any]:
        """A block bought less than `seconds` ago stays out of `client`'s
        DescribeCapacityReservations listings (without ids; None: everyone's); 0 disarms."""
        return self.set_consistency_lag("reservation-listing", seconds, client)

    def instance_history(self) -> list[dict[str, Any]]:
        """Every instance EC2 ran, in DescribeInstances' shape, terminated ones included even
        after they are gone from its answers (EC2's usage record)."""
        return list(self._call("GET", "instance-history")["instances"])

    def set_eni_detach_delay(self, seconds: float) -> dict[str, Any]:
        return self._call("POST", "eni-detach-delay", {"seconds": seconds})

    def publish_eks_ami(
        self, parameter: str, image_id: str, region: str | None = None
    ) -> dict[str, Any]:
        """AWS rotates the AMI EKS recommends under `parameter` (PutParameter under /aws/ is
        refused to everyone else, as on AWS)."""
        body = {"parameter": parameter, "image_id": image_id, "region": region}
        return self._call("POST", "eks/ami", body)

    def set_eks_ami_owner_alias(self, alias: str | None, region: str | None = None) -> None:
        """The seeded EKS AMIs' ImageOwnerAlias: "amazon" (the default) or None (none)."""
        self._call("POST", "eks/ami-owner-alias", {"alias": alias, "region": region})

    def share_public_ami(self, owner_id: str, name: str, region: str | None = None) -> str:
        """Another account (`owner_id`) shares a public AMI; returns its id."""
        body = {"owner_id": owner_id, "name": name, "region": region}
        return str(self._call("POST", "ec2/public-image", body)["image_id"])

    def register_eks_cluster(
        self,
        name: str,
        *,
        endpoint: str | None = None,
        certificate_authority_data: str | None = None,
        service_ipv4_cidr: str | None = None,
        version: str | None = None,
        subnet_ids: Sequence[str] = (),
        security_group_ids: Sequence[str] = (),
        role_arn: str | None = None,
        region: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "endpoint": endpoint,
            "certificate_authority_data": certificate_authority_data,
            "service_ipv4_cidr": service_ipv4_cidr,
            "version": version,
            "subnet_ids": list(subnet_ids),
            "security_group_ids": list(security_group_ids),
            "role_arn": role_arn,
            "region": region,
        }
        return self._call("POST", "eks/cluster", body)

    def add_capacity_reservation(
        self,
        instance_type: str,
        availability_zone: str,
        count: int,
        reservation_type: str = "default",
        start: float | dt.datetime | None = None,
        end: float | dt.datetime | None = None,
        match: str = "targeted",
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Create an ODCR (`default`) or a Capacity Block (`capacity-block`) with `tags`; its id.

        `start`/`end` are epoch seconds or aware datetimes on the emulator's clock. A block
        is `scheduled` until `start`, `active` until `end`, then `expired` (and EC2 reclaims
        its instances); an ODCR without them is active from now with no end. `tags`: its
        owner's (the cluster tag gives it to a cluster).
        """
        body = {
            "instance_type": instance_type,
            "availability_zone": availability_zone,
            "count": count,
            "reservation_type": reservation_type,
            "start": _epoch(start),
            "end": _epoch(end),
            "match": match,
            "tags": dict(tags or {}),
        }
        return str(self._call("POST", "capacity-reservations", body)["capacity_reservation_id"])

    def force_reservation_state(
        self, reservation_id: str, state: str | None, launch_error: str | None = None
    ) -> None:
        """Show the reservation in a documented state EC2 moves it to on its own
        (`unavailable`, `payment-pending`, ...); None returns it to the clock's state.
        `launch_error` is the code a launch into it answers (EC2 does not document one)."""
        self._call(
            "POST",
            "capacity-reservation-state",
            {"reservation_id": reservation_id, "state": state, "launch_error": launch_error},
        )

    def set_fleet_placement_answer(self, answer: str) -> None:
        """How an instant fleet answers an override in another zone than its cluster
        placement group's instances: `per-override` (default) or `refuse-call`."""
        self._call("POST", "fleet-placement-answer", {"answer": answer})

    def set_dry_run_validation(self, on: bool) -> None:
        """Whether RunInstances/CreateFleet/CreateLaunchTemplate with DryRun also check
        their parameters (off: a permission check only, as EC2's DryRun documents)."""
        self._call("POST", "dry-run-validation", {"on": on})

    def require_launch_tags(self, keys: list[str]) -> None:
        """The account's organization denies RunInstances/CreateFleet whose instances lack
        any of `keys` (an SCP, `organization`); [] lifts it."""
        self._call("POST", "organization/required-launch-tags", {"tags": keys})

    def add_capacity_block_offering(
        self,
        instance_type: str,
        availability_zone: str,
        instances: int,
        start: float | dt.datetime,
        duration_hours: int,
        upfront_fee: float | int | str,
    ) -> str:
        """Capacity on EC2's Capacity Block calendar: `instances` of a type in a zone from
        `start` for `duration_hours`, each at `upfront_fee` for the whole block (an offering
        for k instances costs k times it); DescribeCapacityBlockOfferings answers it and
        PurchaseCapacityBlock shrinks it. Returns the calendar entry's id."""
        body = {
            "instance_type": instance_type,
            "availability_zone": availability_zone,
            "instances": instances,
            "start": _epoch(start),
            "duration_hours": duration_hours,
            "upfront_fee": upfront_fee,
        }
        return str(self._call("POST", "capacity-block-offerings", body)["entry_id"])

    def capacity_block_calendar(self) -> list[dict[str, Any]]:
        """What is left on the Capacity Block calendar, soonest first."""
        return list(self._call("GET", "capacity-block-offerings")["calendar"])

    def capacity_reservations(self) -> list[dict[str, Any]]:
        """Every reservation as DescribeCapacityReservations shows it (dates as strings)."""
        return list(self._call("GET", "capacity-reservations")["capacity_reservations"])

    def launch_requests(
        self, action: str | None = None, last: int | None = None
    ) -> list[dict[str, Any]]:
        """RunInstances/CreateFleet requests as they reached EC2, oldest first: each with
        `action`, `params` (as sent), `instance_ids` launched and `error` (code or None)."""
        query = {k: v for k, v in (("action", action), ("last", last)) if v is not None}
        path = "launch-requests" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        return list(self._call("GET", path)["launch_requests"])

    def instance_events(self, after: int, wait: float = 0.0) -> dict[str, Any]:
        """Launches and terminations numbered above `after` (see `instance_events`)."""
        if wait >= self.timeout:
            raise ValueError(f"wait ({wait}s) must be shorter than the timeout ({self.timeout}s)")
        query = urllib.parse.urlencode({"after": after, "wait": wait})
        return self._call("GET", f"instance-events?{query}")

    def throttling(self) -> dict[str, Any]:
        """EC2's buckets as the emulator enforces them, and `throttled`/`total`: the calls
        they refused (answered RequestLimitExceeded)."""
        return self._call("GET", "throttling")

    def set_throttling(self, **body: Any) -> dict[str, Any]:
        """`enabled`, `mutating`/`non_mutating` ({size, refill}), `resources` by action."""
        return self._call("POST", "throttling", body)

    def request_costs(self) -> dict[str, dict[str, Any]]:
        """Requests, CPU seconds and requests by client (access key id) per AWS call since
        the last reset, costliest first."""
        return dict(self._call("GET", "requests")["requests"])

    def now(self) -> float:
        """The emulator's clock (epoch seconds), which reservation states follow."""
        return float(self._call("GET", "clock")["now"])

    def s3_writes(self, after: int = 0) -> list[dict[str, Any]]:
        """Every S3 PUT/POST/DELETE received after the ``after``-th, in order (`s3_writes`)."""
        return list(self._call("GET", f"s3-writes?after={int(after)}")["writes"])

    def ec2_writes(self, after: int = 0) -> list[dict[str, Any]]:
        """Every mutating EC2 call numbered above ``after`` (see `ec2_writes`)."""
        return list(self._call("GET", f"ec2-writes?after={after}")["writes"])

    def advance_clock(self, seconds: float) -> float:
        """Move the emulator's clock forward (a block starts or ends); the new now."""
        return float(self._call("POST", "clock", {"advance_seconds": seconds})["now"])

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.endpoint_url}{CONTROL_PREFIX}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as error:
            with error:
                payload = _error_payload(error.read())
            raise EmulatorControlError(
                error.code, str(payload.get("error")), payload.get("field")
            ) from None


def _epoch(value: float | dt.datetime | None) -> float | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError("datetimes sent to the emulator must be timezone-aware")
        return value.timestamp()
    return value


def _error_payload(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw)
    except ValueError:
        return {"error": raw.decode(errors="replace"), "field": None}
    return payload if isinstance(payload, dict) else {"error": str(payload), "field": None}
