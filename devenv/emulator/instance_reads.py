"""P16: moto's reads of instances, without copying every reservation of the region first.

moto answers each read of an instance (`get_instance`, by id: what an ENI attachment, a
tag, an attribute read and a launch in a placement group each do) and each DescribeInstances
by ids or by an `instance-id` filter by first copying every reservation of the region
(`all_reservations`), then walking the copies. A copy is shallow (the instances are the
same objects), so only the copies a caller narrows need to exist. Sampled in
`bench_scale`'s cold wave at 1,000 pools, those copies and walks were a fifth of the
emulator's busy time. Each function here gives moto's answer (or raises its error) from the
region's own reservations, copying only those an answer keeps; `test_emulator_hot_paths.py`
checks each against moto's original on the same instances.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from moto.ec2.exceptions import InvalidInstanceIdError
from moto.ec2.models import EC2Backend
from moto.ec2.utils import filter_dict_attribute_mapping, filter_reservations, is_tag_filter

from devenv.emulator.patching import patch

__all__ = ["BACKEND_READS", "install_instance_reads", "reservations_by_instance_ids"]


def _instances(backend: Any) -> Iterator[Any]:
    # A copy of the values, as moto takes one: a launch may add a reservation meanwhile.
    for reservation in list(backend.reservations.values()):
        yield from reservation.instances


def get_instance(self: Any, instance_id: str) -> Any:
    for instance in _instances(self):
        if instance.id == instance_id:
            return instance
    raise InvalidInstanceIdError(instance_id)


def get_instance_by_id(self: Any, instance_id: str) -> Any:
    return next((i for i in _instances(self) if i.id == instance_id), None)


def get_multi_instances_by_id(self: Any, instance_ids: list[str], filters: Any = None) -> list[Any]:
    every = {instance.id: instance for instance in _instances(self)}
    missing = [instance_id for instance_id in instance_ids if instance_id not in every]
    if missing:
        raise InvalidInstanceIdError(missing)
    return [every[i] for i in instance_ids if every[i].applies(filters)]


def _holding(backend: Any, instance_ids: Sequence[str]) -> list[Any]:
    """Copies of the reservations that hold one of the ids, in the region's order."""
    wanted = set(instance_ids)
    return [
        copy.copy(reservation)
        for reservation in list(backend.reservations.values())
        if any(instance.id in wanted for instance in reservation.instances)
    ]


def _known(filters: Mapping[str, Any]) -> bool:
    # moto raises NotImplementedError on the first instance it tests against a filter it
    # does not know; narrowing first could leave no instance to raise on.
    return all(name in filter_dict_attribute_mapping or is_tag_filter(name) for name in filters)


def all_reservations(self: Any, filters: Any = None) -> list[Any]:
    """moto's; with an `instance-id` filter, only the reservations holding one of those ids
    are copied and filtered (the filter compares ids exactly, so no other could pass)."""
    ids = filters.get("instance-id") if filters else None
    if ids is None or not _known(filters):
        reservations = [copy.copy(r) for r in list(self.reservations.values())]
    else:
        reservations = _holding(self, ids)
    return reservations if filters is None else filter_reservations(reservations, filters)


def reservations_by_instance_ids(
    backend: Any, instance_ids: list[str], filters: Any = None
) -> list[Any]:
    """moto's `get_reservations_by_instance_ids`, copying only the reservations it keeps."""
    reservations = _holding(backend, instance_ids)
    for reservation in reservations:
        reservation.instances = [i for i in reservation.instances if i.id in instance_ids]
    found = [instance.id for reservation in reservations for instance in reservation.instances]
    if len(found) != len(instance_ids):
        # moto's expression, kept: asked for one id twice, moto fails with IndexError.
        unknown = list(set(instance_ids).difference(set(found)))[0]  # noqa: RUF015
        raise InvalidInstanceIdError(unknown)
    return reservations if filters is None else filter_reservations(reservations, filters)


# The backend's methods P16 replaces, by name (the by-ids listing is called by P4b's wrapper).
BACKEND_READS: Final[dict[str, Callable[..., Any]]] = {
    "get_instance": get_instance,
    "get_instance_by_id": get_instance_by_id,
    "get_multi_instances_by_id": get_multi_instances_by_id,
    "all_reservations": all_reservations,
}


def install_instance_reads() -> None:
    for name, read in BACKEND_READS.items():
        patch(EC2Backend, name, read)
