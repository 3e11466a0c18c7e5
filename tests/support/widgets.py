"""Widgets: the test-only custom resource the `provisioner/kube` integration tests run on.

`WIDGETS` names the resource (its CRD is installed by `tests/integration/conftest_kube.py`),
and `Widget` is its typed view, so those tests read and write it through `kube.status`'s
typed helpers as the reconcilers do theirs. The CRD keeps spec and status open, so the
model only names the fields the tests use; an unset field is left out of what is written.
"""

from __future__ import annotations

from provisioner.api.meta import KubeModel, ObjectMeta
from provisioner.kube.resources import ResourceRef

__all__ = ["WIDGETS", "Widget", "WidgetSpec", "WidgetStatus", "new_widget"]

WIDGETS = ResourceRef("test.atomic-gang.k8s.aws", "v1", "widgets", True, "Widget")


class WidgetSpec(KubeModel):
    size: int


class WidgetStatus(KubeModel):
    phase: str | None = None
    ids: tuple[str, ...] | None = None
    observed_size: int | None = None


class Widget(KubeModel):
    api_version: str = WIDGETS.api_version
    kind: str = WIDGETS.kind
    metadata: ObjectMeta
    spec: WidgetSpec
    status: WidgetStatus = WidgetStatus()

    def with_finalizers(self, *finalizers: str) -> Widget:
        """This widget with exactly these finalizers (for `update_object`)."""
        metadata = self.metadata.model_copy(update={"finalizers": finalizers})
        return self.model_copy(update={"metadata": metadata})


def new_widget(name: str, namespace: str, *, size: int) -> Widget:
    """A new widget of that size, not yet created."""
    return Widget(metadata=ObjectMeta(name=name, namespace=namespace), spec=WidgetSpec(size=size))
