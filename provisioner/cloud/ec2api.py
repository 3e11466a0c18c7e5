"""The AWS surface the engine uses, written down, and the one place clients are built.

Called by the composition root (``build_clients``, handed to :class:`Ec2Engine`), by the
operator commands (``operator_clients``), by the stack providers (``stacks.aws``, through
``client_config`` and ``make_client``) and by the stack driver (``state_bucket_client``, for
the Pulumi state bucket): one retry policy and one way to make a client. Unit
tests hand moto-backed or stubbed boto3 clients instead, which satisfy the same protocols.
A call not listed here is a call the engine does not make: adding one means adding it here
and to the controller's IAM policy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import boto3  # type: ignore[import-untyped,unused-ignore]
import botocore.session  # type: ignore[import-untyped,unused-ignore]
from botocore.config import Config  # type: ignore[import-untyped,unused-ignore]
from botocore.utils import parse_timestamp  # type: ignore[import-untyped,unused-ignore]

from provisioner.cloud.fencing import Gate, fence_client

AwsResponse = dict[str, Any]


class Ec2Api(Protocol):
    def run_instances(self, **kwargs: Any) -> AwsResponse: ...

    def create_fleet(self, **kwargs: Any) -> AwsResponse: ...

    def terminate_instances(self, **kwargs: Any) -> AwsResponse: ...

    def describe_fleets(self, **kwargs: Any) -> AwsResponse: ...

    def describe_instances(self, **kwargs: Any) -> AwsResponse: ...

    def describe_network_interfaces(self, **kwargs: Any) -> AwsResponse: ...

    def delete_network_interface(self, **kwargs: Any) -> AwsResponse: ...

    def create_tags(self, **kwargs: Any) -> AwsResponse: ...

    def describe_subnets(self, **kwargs: Any) -> AwsResponse: ...

    def describe_instance_types(self, **kwargs: Any) -> AwsResponse: ...

    def describe_capacity_reservations(self, **kwargs: Any) -> AwsResponse: ...

    def describe_capacity_block_offerings(self, **kwargs: Any) -> AwsResponse: ...

    def purchase_capacity_block(self, **kwargs: Any) -> AwsResponse: ...

    def describe_launch_templates(self, **kwargs: Any) -> AwsResponse: ...

    def create_launch_template(self, **kwargs: Any) -> AwsResponse: ...

    def delete_launch_template(self, **kwargs: Any) -> AwsResponse: ...

    def describe_placement_groups(self, **kwargs: Any) -> AwsResponse: ...

    # Who owns a Job's AMI (`images`, for `amiPolicy`).
    def describe_images(self, **kwargs: Any) -> AwsResponse: ...

    def delete_placement_group(self, **kwargs: Any) -> AwsResponse: ...


class SsmApi(Protocol):
    def get_parameter(self, **kwargs: Any) -> AwsResponse: ...


class EksApi(Protocol):
    def describe_cluster(self, **kwargs: Any) -> AwsResponse: ...

    def describe_access_entry(self, **kwargs: Any) -> AwsResponse: ...


class IamApi(Protocol):
    def get_instance_profile(self, **kwargs: Any) -> AwsResponse: ...


class S3Api(Protocol):
    """The Pulumi state bucket, reached beside the CLI only to remove the lock of a stack
    that was never created and to keep a first prepare's intent (``statebucket``)."""

    def list_objects_v2(self, **kwargs: Any) -> AwsResponse: ...

    def get_object(self, **kwargs: Any) -> AwsResponse: ...

    def put_object(self, **kwargs: Any) -> AwsResponse: ...

    def delete_object(self, **kwargs: Any) -> AwsResponse: ...


class AwsCallObserver(Protocol):
    """Told of every call a watched client makes (`watch_calls`): the service, the action
    as AWS names it (RunInstances), AWS's error code (None when it succeeded), and the
    call's wall time in seconds, botocore's retries and their back-off included (None when
    the call's start was not seen: a handler registered ahead of ours answered it)."""

    def called(
        self, service: str, action: str, error_code: str | None, seconds: float | None
    ) -> None: ...


def watch_calls(client: Any, observer: AwsCallObserver) -> Any:
    """Report each of ``client``'s calls to ``observer``, once per call after botocore's
    retries: its answer (``after-call``: HTTP status and, for an error, AWS's code), or the
    exception that left no answer (``after-call-error``: a timeout, a refused connection,
    counted under the exception's name), with the time since ``before-call``. The start
    rides in the call's own request context, so concurrent calls on one client never mix
    their times. Returns ``client``."""
    service = str(client.meta.service_model.service_id.hyphenize())

    def started(context: Any = None, **_: Any) -> None:
        if isinstance(context, dict):
            context[_STARTED] = time.monotonic()

    def elapsed(context: Any) -> float | None:
        start = context.get(_STARTED) if isinstance(context, dict) else None
        return None if start is None else max(time.monotonic() - start, 0.0)

    def answered(
        http_response: Any, parsed: Any, model: Any, context: Any = None, **_: Any
    ) -> None:
        code = None
        if int(getattr(http_response, "status_code", 200)) >= 300:
            code = str(((parsed or {}).get("Error") or {}).get("Code") or "Unknown")
        observer.called(service, str(model.name), code, elapsed(context))

    def unanswered(
        exception: BaseException, event_name: str, context: Any = None, **_: Any
    ) -> None:
        # The event is named after-call-error.<service>.<Action>.
        action = event_name.rpartition(".")[2]
        observer.called(service, action, type(exception).__name__, elapsed(context))

    # First: a before-call handler that answers the call itself ends the chain there.
    client.meta.events.register_first("before-call", started)
    client.meta.events.register("after-call", answered)
    client.meta.events.register("after-call-error", unanswered)
    return client


# The key `watch_calls` keeps a call's start under, in botocore's per-call request context.
_STARTED = "atomic_gang_call_started"


@dataclass(frozen=True)
class CloudClients:
    """One client per service, all for the cluster's region."""

    ec2: Ec2Api
    ssm: SsmApi
    eks: EksApi
    iam: IamApi
    # EC2 with ONE attempt and no SDK retry, for the calls that take no ClientToken and
    # must never be repeated blindly: PurchaseCapacityBlock (`block_purchase`). None: the
    # clients cannot buy.
    ec2_once: Ec2Api | None = None


DEFAULT_MAX_ATTEMPTS = 5


def parse_aws_timestamp(value: Any) -> Any:
    """A response's timestamp as botocore gives it (an aware datetime), parsed quickly.

    AWS sends ISO 8601 with an offset ("2026-12-01T16:55:23.000Z"), which the standard
    library reads directly. botocore reads every timestamp through dateutil's general
    parser instead, and at hundreds of instances per DescribeInstances listing that was a
    twentieth of the controller's CPU. Anything else (epoch seconds, RFC 822, a naive time)
    goes to botocore's own parser, so the answers are the same datetimes either way.
    """
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed
    return parse_timestamp(value)


def new_session(**credentials: str) -> Any:
    """A boto3 session (the default credential chain, unless ``credentials`` name keys)
    whose clients parse timestamps with ``parse_aws_timestamp``."""
    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=parse_aws_timestamp
    )
    return boto3.session.Session(botocore_session=core, **credentials)


def operator_session(endpoint_url: str | None) -> Any:
    """The operator's session: the default chain, or, with an endpoint (the local emulator,
    which takes any key), fixed keys, so an operator's real credentials never reach it."""
    if endpoint_url:
        return new_session(aws_access_key_id="local", aws_secret_access_key="local")
    return new_session()


def default_session() -> Any:
    """A session on the default credential chain (Pod Identity, IRSA, env, instance role)."""
    return new_session()


def webhook_ec2_client(region: str, endpoint_url: str | None, session: Any | None = None) -> Any:
    """The EC2 client the webhook reads images, instance types and reservations with, on the
    controller's own credentials (the default chain). Short timeouts and one retry: the
    webhook answers the apiserver within its timeout, and a refusal that says EC2 did not
    answer beats a timed-out call the failure policy decides."""
    return build_clients(
        session or default_session(),
        region,
        endpoint_url,
        max_attempts=2,
        connect_timeout=2.0,
        read_timeout=4.0,
    ).ec2


def client_config(
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
) -> Any:
    """Every client's retry policy and timeouts. ``max_attempts`` counts the first try.

    botocore's standard retry mode absorbs short throttling bursts; what survives it is
    reported as a RETRYABLE CloudError and retried by the reconciler's backoff.
    """
    return Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


def make_client(
    session: Any, service: str, region: str, endpoint_url: str | None, config: Any
) -> Any:
    """One client; ``endpoint_url`` (the local emulator serves every service on one port)
    replaces AWS's own endpoint when set."""
    return session.client(
        service, region_name=region, endpoint_url=endpoint_url or None, config=config
    )


def build_clients(
    session: Any,
    region: str,
    endpoint_url: str | None = None,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    observer: AwsCallObserver | None = None,
    gate: Gate | None = None,
) -> CloudClients:
    """Clients from ``session`` for ``region``; ``endpoint_url`` points all four at one
    endpoint. With ``observer``, each client reports its calls (`watch_calls`); with
    ``gate`` (the leadership fence's), no mutating call of any of them is sent while the
    gate refuses it (``fencing``)."""
    config = client_config(
        max_attempts=max_attempts, connect_timeout=connect_timeout, read_timeout=read_timeout
    )

    once = client_config(max_attempts=1, connect_timeout=connect_timeout, read_timeout=read_timeout)

    def make(service: str, settings: Any = config) -> Any:
        client = make_client(session, service, region, endpoint_url, settings)
        if gate is not None:
            fence_client(client, gate)
        return client if observer is None else watch_calls(client, observer)

    return CloudClients(
        ec2=make("ec2"),
        ssm=make("ssm"),
        eks=make("eks"),
        iam=make("iam"),
        ec2_once=make("ec2", once),
    )


def state_bucket_client(region: str, endpoint_url: str | None = None) -> S3Api:
    """The state bucket's client on the default credential chain: the credentials the
    Pulumi CLI inherits, so the controller reaches the bucket exactly as the CLI does."""
    client: S3Api = make_client(default_session(), "s3", region, endpoint_url, client_config())
    return client


def default_clients(region: str, endpoint_url: str | None = None) -> CloudClients:
    """Clients from the default credential chain (Pod Identity, IRSA, env, instance role)."""
    return build_clients(default_session(), region, endpoint_url)


def operator_clients(region: str, endpoint_url: str | None = None) -> CloudClients:
    """Clients for the operator's commands (`atomic-gang doctor`), two tries per call.

    With an endpoint, the settings point at the local emulator (`operator_session`).
    """
    return build_clients(operator_session(endpoint_url), region, endpoint_url, max_attempts=2)
