"""The event recorder the reconcilers write to (`provisioner.kube.events`), in memory."""

from __future__ import annotations

from provisioner.kube.events import NORMAL, WARNING, InvolvedObject


class RecordedEvents:
    """Each event as (type, reason, message), in the order recorded."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        # The object each event is about, in the same order.
        self.involved: list[InvolvedObject] = []

    def reset(self) -> None:
        self.events.clear()
        self.involved.clear()

    @property
    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def record(self, obj: InvolvedObject, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))
        self.involved.append(obj)

    def normal(self, obj: InvolvedObject, reason: str, message: str) -> None:
        self.record(obj, NORMAL, reason, message)

    def warning(self, obj: InvolvedObject, reason: str, message: str) -> None:
        self.record(obj, WARNING, reason, message)
