"""Launch templates named by id that do not exist: EC2's not-found answer, not moto's.

The page "Error codes for the Amazon EC2 API" lists ``InvalidLaunchTemplateId.NotFound``
("the specified launch template ID does not exist") beside
``InvalidLaunchTemplateName.NotFoundException`` for a missing name. moto answers a
`DescribeLaunchTemplates` that names a missing id with an empty success, and a
`DeleteLaunchTemplate` of a missing id with the name's code. A listing by filter that
matches nothing stays an empty success (DescribeLaunchTemplates: filters select, ids name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from moto.ec2.exceptions import InvalidLaunchTemplateIdNotFound
from moto.ec2.models import EC2Backend

from devenv.emulator.patching import original

__all__ = ["backend_delete_launch_template", "backend_describe_launch_templates", "missing_id"]


def missing_id(backend: Any, template_ids: Sequence[str]) -> str | None:
    """The first of ``template_ids`` this region has no launch template for."""
    return next((tid for tid in template_ids if tid not in backend.launch_templates), None)


def backend_describe_launch_templates(
    self: Any,
    template_names: list[str] | None = None,
    template_ids: list[str] | None = None,
    filters: Any = None,
) -> Any:
    gone = missing_id(self, template_ids or ())
    if gone is not None:
        raise InvalidLaunchTemplateIdNotFound(gone)
    return original(EC2Backend, "describe_launch_templates")(
        self, template_names=template_names, template_ids=template_ids, filters=filters
    )


def backend_delete_launch_template(self: Any, name: str, tid: str | None) -> Any:
    if not name and tid and tid not in self.launch_templates:
        raise InvalidLaunchTemplateIdNotFound(tid)
    return original(EC2Backend, "delete_launch_template")(self, name, tid)
