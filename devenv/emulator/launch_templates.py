"""Launch templates as EC2 answers for them where moto does not.

Not found: the page "Error codes for the Amazon EC2 API" lists
``InvalidLaunchTemplateId.NotFound`` ("the specified launch template ID does not exist")
beside ``InvalidLaunchTemplateName.NotFoundException`` for a missing name. moto answers a
`DescribeLaunchTemplates` that names a missing id with an empty success, and a
`DeleteLaunchTemplate` of a missing id with the name's code. A listing by filter that
matches nothing stays an empty success (DescribeLaunchTemplates: filters select, ids name).

ClientToken (`remembered_create`): CreateLaunchTemplate takes one, and moto ignores it.
"Ensuring idempotency in Amazon EC2 API requests" lists CreateLaunchTemplate among the
actions idempotent by client token: a retry of a request that completed, with the same
token and the same parameters, "succeeds without performing any further actions" and
answers as the original did, and the same token with other parameters fails with
``IdempotentParameterMismatch``. The page sets no exception for a template deleted since,
so the original answer (the deleted template's id) is what a retry gets; a request that
failed is not remembered, and neither is a dry run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidLaunchTemplateIdNotFound
from moto.ec2.models import EC2Backend

from devenv.emulator.model import request_fingerprint
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR

__all__ = [
    "backend_delete_launch_template",
    "backend_describe_launch_templates",
    "missing_id",
    "remembered_create",
]

ACTION = "CreateLaunchTemplate"


def remembered_create(response: Any, create: Callable[[], ActionResult]) -> Any:
    """CreateLaunchTemplate as EC2 answers a ClientToken (module docstring): a seen token
    with the same parameters answers the original result, with others
    IdempotentParameterMismatch; a new one creates and is remembered."""
    params: dict[str, Any] = response.params
    token = params.get("ClientToken")
    if not token:
        return create()
    backend = response.ec2_backend
    fingerprint = request_fingerprint(params)
    earlier = EMULATOR.recall(backend, ACTION, str(token), fingerprint)
    if earlier is not None:
        return ActionResult(copy.deepcopy(earlier))
    made = create()
    EMULATOR.remember(backend, ACTION, str(token), fingerprint, copy.deepcopy(made.result))
    return made


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
