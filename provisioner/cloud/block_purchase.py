"""Buying a Capacity Block, and finding one bought for an intent: the two EC2 calls of the
pool's purchase (`controllers/pool/plan_purchase`).

"PurchaseCapacityBlock" (EC2 API Reference) takes an offering id, the instance platform and
TagSpecifications (ResourceType capacity-reservation), and answers the new reservation. It
takes no ClientToken, so a retried call can buy a second block: it is sent on a client
that makes ONE attempt (`CloudClients.ec2_once`), never the retrying one. Its failure is
`BlockPurchaseRefused` only when EC2 refused the request (a 4xx answer: nothing was
bought); any other failure (no answer, a 5xx, a timeout) leaves the purchase unknown, and the
pool reads the reservations tagged with its intent ("DescribeCapacityReservations", filter
`tag:<key>`) before it may call again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from botocore.exceptions import ClientError, ParamValidationError

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, error_code, to_cloud_error

__all__ = ["PLATFORM", "BlockPurchaseRefused", "find_bought_block", "purchase_block"]

# Gang nodes run the EKS-optimized AL2023 AMIs (Linux); CapacityReservationInstancePlatform.
PLATFORM: Final = "Linux/UNIX"
# Answers with a 4xx status that still say nothing about whether the call took effect.
_NOT_A_REFUSAL: Final = frozenset({"RequestLimitExceeded", "Throttling", "RequestExpired"})


class BlockPurchaseRefused(CloudError):
    """EC2 refused the purchase: nothing was bought, a new intent may be made."""


def purchase_block(ec2_once: Ec2Api, offering_id: str, tags: Mapping[str, str]) -> str:
    """Buy `offering_id` with `tags`, in one attempt; the new reservation's id."""
    try:
        answer = ec2_once.purchase_capacity_block(
            CapacityBlockOfferingId=offering_id,
            InstancePlatform=PLATFORM,
            TagSpecifications=[
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )
    except ParamValidationError as exc:  # raised before anything was sent
        raise _refused(exc, offering_id) from exc
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if 400 <= int(status) < 500 and error_code(exc) not in _NOT_A_REFUSAL:
            raise _refused(exc, offering_id) from exc
        raise _unknown(exc, offering_id) from exc
    except Exception as exc:
        raise _unknown(exc, offering_id) from exc
    return str(answer["CapacityReservation"]["CapacityReservationId"])


def _refused(exc: Exception, offering_id: str) -> BlockPurchaseRefused:
    err = to_cloud_error(exc, f"buying Capacity Block offering {offering_id}")
    return BlockPurchaseRefused(ErrorKind.CONFIG, err.code, err.reason, str(err.message))


def _unknown(exc: Exception, offering_id: str) -> CloudError:
    err = to_cloud_error(exc, f"buying Capacity Block offering {offering_id}")
    return CloudError(
        ErrorKind.RETRYABLE,
        err.code,
        "CapacityBlockPurchaseUnknown",
        f"{err.message} Whether the block was bought is not known; the reservations tagged "
        "with the purchase's intent are read before any other call.",
    )


def find_bought_block(ec2: Ec2Api, cluster: str, intent: str) -> str | None:
    """The reservation bought under `intent` for `cluster`, if EC2 lists one."""
    try:
        answer = ec2.describe_capacity_reservations(
            Filters=[
                {"Name": f"tag:{c.TAG_PURCHASE_INTENT}", "Values": [intent]},
                {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [cluster]},
            ]
        )
    except Exception as exc:
        raise to_cloud_error(exc, f"looking for the Capacity Block of intent {intent}") from exc
    found = sorted(str(r["CapacityReservationId"]) for r in answer.get("CapacityReservations", []))
    return found[0] if found else None
