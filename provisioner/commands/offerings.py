"""`atomic-gang offerings`: the Capacity Blocks EC2 would sell for a gang, and the one the
controller's rule would buy, without buying anything.

Called by `provisioner.commands.cli` (`main(argv)`). Asks EC2 (DescribeCapacityBlockOfferings,
a read) for `--count` x `--instance-type` for `--duration` (a duration EC2 sells: 1 to 14
days in whole days, then 3 to 26 weeks in whole weeks), and marks the offering
`block_offerings.choose_offering` picks: the earliest start within `--max-fee` (the upfront
fee of the whole block), the lower fee on a tie, none starting after `--latest-start`. When
none fits, it says so and names the earliest offering with its fee: what a team would have
to accept to run sooner.

The region and EC2 endpoint are the controller's settings: settings flags
(`--defaults.region`, `--aws.endpoint-url`, `--config FILE`) when given, else the installed
controller's settings ConfigMap, found as `pools` and `doctor` find it. The operator's own
AWS credentials sign the call (the default chain), as `doctor`'s do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from provisioner.api.clock import SYSTEM_CLOCK, Clock
from provisioner.api.durations import DurationError, parse_duration
from provisioner.api.settings_sources import SettingsError, settings_from_argv
from provisioner.cloud.block_offerings import (
    ALLOWED_DURATION_HOURS,
    CapacityBlockOffering,
    OfferingChoice,
    choose_offering,
)
from provisioner.cloud.engine_ops import EngineOps
from provisioner.cloud.errors import CloudError
from provisioner.commands.kubectl_flags import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_OK,
    add_cluster_flags,
    add_output_flag,
    dump,
    formatter,
)

__all__ = ["OfferingsQuery", "build_parser", "main", "render"]

HEADERS = ("", "OFFERING", "ZONE", "START", "END", "UPFRONT FEE")
WIDE_HEADERS = (*HEADERS, "TYPE", "COUNT", "HOURS")
CHOSEN_MARK = "*"


@dataclass(frozen=True)
class OfferingsQuery:
    instance_type: str
    count: int
    duration_hours: int
    max_fee: Decimal | None
    latest_start: datetime | None


def _duration_hours(text: str) -> int:
    try:
        duration = parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    hours, rest = divmod(duration, timedelta(hours=1))
    if rest or hours not in ALLOWED_DURATION_HOURS:
        raise argparse.ArgumentTypeError(
            f"{text} is not a duration EC2 sells Capacity Blocks for: give whole days from "
            "24h to 336h (1-14 days), or whole weeks from 504h to 4368h (3-26 weeks)"
        )
    return int(hours)


def _fee(text: str) -> Decimal:
    try:
        fee = Decimal(text)
    except InvalidOperation:
        fee = Decimal(-1)
    if not fee.is_finite() or fee < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount: give e.g. 2500 or 2500.50")
    return fee


def _latest_start(text: str, now: datetime) -> datetime:
    """A duration from now (Go's form: 90m, 6h) or an RFC 3339 time with its offset."""
    try:
        return now + parse_duration(text)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration from now (6h, 90m) nor a time with its offset "
            "(2030-01-01T12:00:00Z)"
        )
    return moment


def build_parser(prog: str = "atomic-gang offerings") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List the Capacity Blocks EC2 offers for a gang and mark the one the "
        "controller would buy (the earliest start within --max-fee, the lower fee on a tie). "
        "Buys nothing. Settings flags (--config FILE, --defaults.region R, "
        "--aws.endpoint-url URL) are the controller's; without them, the installed "
        "controller's settings are read from the cluster.",
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    add_cluster_flags(parser, namespace=None)
    parser.add_argument("--instance-type", required=True, help="e.g. p5.48xlarge")
    parser.add_argument("--count", type=int, required=True, help="instances in the gang (1-64)")
    parser.add_argument(
        "--duration",
        type=_duration_hours,
        required=True,
        metavar="DURATION",
        help="how long the block runs: 24h..336h in whole days, 504h..4368h in whole weeks",
    )
    parser.add_argument(
        "--max-fee",
        type=_fee,
        metavar="AMOUNT",
        help="the most to pay up front for the whole block (in the offering's currency)",
    )
    parser.add_argument(
        "--latest-start",
        metavar="WHEN",
        help="the latest acceptable start: a duration from now (6h) or an RFC 3339 time",
    )
    add_output_flag(
        parser,
        "table",
        wide="also TYPE, COUNT, HOURS",
        documents="{query, chosen, earliest, why, offerings}",
    )
    return parser


def _row(offering: CapacityBlockOffering, chosen: bool, wide: bool) -> tuple[str, ...]:
    o = offering
    cells = (
        CHOSEN_MARK if chosen else "",
        o.offering_id,
        o.availability_zone,
        o.start.isoformat(),
        o.end.isoformat(),
        f"{o.upfront_fee} {o.currency}",
    )
    return cells + (o.instance_type, str(o.instance_count), str(o.duration_hours)) * wide


def _document(o: CapacityBlockOffering) -> dict[str, Any]:
    return {
        "offeringId": o.offering_id,
        "instanceType": o.instance_type,
        "availabilityZone": o.availability_zone,
        "instanceCount": o.instance_count,
        "start": o.start.isoformat(),
        "end": o.end.isoformat(),
        "durationHours": o.duration_hours,
        "upfrontFee": str(o.upfront_fee),
        "currency": o.currency,
    }


def render(
    query: OfferingsQuery,
    offerings: Sequence[CapacityBlockOffering],
    choice: OfferingChoice,
    output: str,
) -> str:
    chosen_id = choice.chosen.offering_id if choice.chosen else None
    if output in ("json", "yaml"):
        return dump(
            {
                "query": {
                    "instanceType": query.instance_type,
                    "count": query.count,
                    "durationHours": query.duration_hours,
                    "maxFee": None if query.max_fee is None else str(query.max_fee),
                    "latestStart": query.latest_start.isoformat() if query.latest_start else None,
                },
                "chosen": chosen_id,
                "earliest": choice.earliest.offering_id if choice.earliest else None,
                "why": choice.why,
                "offerings": [_document(o) for o in offerings],
            },
            output,
        )
    wide = output == "wide"
    cells: list[tuple[str, ...]] = [WIDE_HEADERS if wide else HEADERS]
    cells += [_row(o, o.offering_id == chosen_id, wide) for o in offerings]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    table = "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
    verdict = (
        f"{CHOSEN_MARK} would be bought: {choice.chosen.describe()}"
        if choice.chosen
        else f"nothing would be bought: {choice.why}"
    )
    return f"{table}\n\n{verdict}"


def _engine_for(settings: Any, clock: Clock) -> EngineOps:
    from provisioner.cloud.ec2api import operator_clients
    from provisioner.cloud.engine import Ec2Engine

    clients = operator_clients(settings.defaults.region, settings.aws.endpoint_url)
    return Ec2Engine(clients, clock)


def main(
    argv: Sequence[str] | None = None,
    *,
    prog: str = "atomic-gang offerings",
    engine: EngineOps | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> int:
    """`engine`: the EC2 engine to ask (None: one on the settings' region and endpoint)."""
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(argv)
    now = clock.now()
    try:
        latest = _latest_start(args.latest_start, now) if args.latest_start else None
    except argparse.ArgumentTypeError as exc:
        parser.error(f"argument --latest-start: {exc}")
    if not 1 <= args.count <= 64:
        parser.error(f"argument --count: {args.count} is outside 1-64 (a Capacity Block's size)")
    query = OfferingsQuery(args.instance_type, args.count, args.duration, args.max_fee, latest)
    if engine is None:
        from provisioner.commands.installation import DiscoveryError
        from provisioner.commands.pools import installed_settings

        try:
            if rest:
                settings = settings_from_argv(rest)
            else:
                settings, source = installed_settings(args)
                print(f"settings: {source}", file=sys.stderr)
        except SettingsError as exc:
            parser.error(str(exc))
        except DiscoveryError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        engine = _engine_for(settings, clock)
    try:
        offerings = engine.capacity_block_offerings(
            query.instance_type, query.count, query.duration_hours, earliest_start=now
        )
    except CloudError as exc:
        print(f"{prog}: error: EC2 did not list the offerings: {exc}", file=sys.stderr)
        return EXIT_ERROR
    choice = choose_offering(offerings, max_fee=query.max_fee, latest_start=query.latest_start)
    print(render(query, offerings, choice, args.output))
    return EXIT_OK
