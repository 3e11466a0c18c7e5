"""`install()`: apply every patch once to this process's moto; P1 wraps every AWS call."""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from moto.core.responses import BaseResponse
from moto.ec2.models import EC2Backend
from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.models.elastic_network_interfaces import Attachment
from moto.ec2.responses import EC2Response
from moto.s3.responses import S3Response

from devenv.emulator.authorization import install_authorization, refusal
from devenv.emulator.ec2_actions import (
    create_launch_template,
    create_placement_group,
    delete_placement_group,
    describe_capacity_reservations,
    describe_placement_groups,
)
from devenv.emulator.eks import install_eks
from devenv.emulator.eks_setup import install_eks_setup
from devenv.emulator.faults import access_key_of, fault_response, s3_fault_response
from devenv.emulator.fleet import create_fleet_handler
from devenv.emulator.hot_paths import install_hot_paths
from devenv.emulator.identity import install_identity
from devenv.emulator.instances import (
    backend_describe_instances,
    backend_get_reservations_by_instance_ids,
    backend_run_instances,
    backend_terminate_instances,
    get_tags,
)
from devenv.emulator.interfaces import attachment_init, backend_attach_network_interface
from devenv.emulator.launch_templates import (
    backend_delete_launch_template,
    backend_describe_launch_templates,
)
from devenv.emulator.offering_actions import (
    describe_capacity_block_offerings,
    purchase_capacity_block,
)
from devenv.emulator.patching import ORIGINALS, original, patch
from devenv.emulator.reserved_tags import reserved_tag_refusal
from devenv.emulator.run_instances import run_instances_handler
from devenv.emulator.state import EMULATOR, EmulatorState
from devenv.emulator.throttling import instances_of

_SEEDED_SERVICES: Final = frozenset({"ec2", "ssm", "eks"})
_install_lock = threading.Lock()


def install() -> EmulatorState:
    """Apply every patch once to this process's moto and return the emulator state."""
    with _install_lock:
        if not ORIGINALS:
            patch(BaseResponse, "call_action", call_action)
            patch(S3Response, "key_response", s3_key_response)
            patch(EC2Response, "run_instances", run_instances_handler)
            patch(EC2Response, "create_fleet", create_fleet_handler)
            patch(EC2Backend, "run_instances", backend_run_instances)
            patch(EC2Backend, "describe_instances", backend_describe_instances)
            patch(
                EC2Backend,
                "get_reservations_by_instance_ids",
                backend_get_reservations_by_instance_ids,
            )
            patch(EC2Backend, "terminate_instances", backend_terminate_instances)
            patch(EC2Backend, "describe_launch_templates", backend_describe_launch_templates)
            patch(EC2Backend, "delete_launch_template", backend_delete_launch_template)
            patch(TaggedEC2Resource, "get_tags", get_tags)
            patch(Attachment, "__init__", attachment_init)
            patch(EC2Backend, "attach_network_interface", backend_attach_network_interface)
            patch(EC2Response, "describe_capacity_reservations", describe_capacity_reservations)
            patch(EC2Response, "create_placement_group", create_placement_group)
            patch(
                EC2Response, "describe_capacity_block_offerings", describe_capacity_block_offerings
            )
            patch(EC2Response, "purchase_capacity_block", purchase_capacity_block)
            patch(EC2Response, "create_launch_template", create_launch_template)
            patch(EC2Response, "describe_placement_groups", describe_placement_groups)
            patch(EC2Response, "delete_placement_group", delete_placement_group)
            install_eks()
            install_eks_setup()
            install_identity()
            install_authorization()
            install_hot_paths()
    return EMULATOR


# --- P1: every AWS call ------------------------------------------------------------------
def call_action(self: Any) -> Any:
    action = str(self._get_action() or "")
    client = access_key_of(self)
    # A delay sleeps outside the lock: a slow call must not stall every other client.
    delay = EMULATOR.take_delay(action, client) if EMULATOR.has_delays() else None
    if delay is not None and not delay.after:
        time.sleep(delay.seconds)
    with EMULATOR.lock:
        if self.service_name in _SEEDED_SERVICES:
            EMULATOR.ensure_seeded(self.current_account, self.region)
        if self.service_name == "ec2":
            EMULATOR.tick(self.ec2_backend)
            # Reserved tag keys: EC2 refuses them before anything else (`reserved_tags`).
            reserved = reserved_tag_refusal(action, self.querystring)
            if reserved is not None:
                return fault_response(self, reserved)
        # The caller's IAM policy, on the calls' resources and condition keys (P11).
        refused = refusal(self, action)
        if refused is not None:
            return refused
        fault = EMULATOR.take_fault(action, client) if EMULATOR.has_faults() else None
        if fault is not None and not fault.after:
            return fault_response(self, fault)
        # EC2's documented throttling (`throttling`): the account's buckets, per region.
        instances = instances_of(action, self.querystring) if self.service_name == "ec2" else 0
        if self.service_name == "ec2":
            throttled = EMULATOR.take_throttle(self.region, action, instances)
            if throttled is not None:
                return fault_response(self, throttled)
        with EMULATOR.calling(action, client):
            answer = original(BaseResponse, "call_action")(self)
        if action == "RunInstances" and _failed(answer):
            EMULATOR.give_back(self.region, action, instances)
    if delay is not None and delay.after:
        time.sleep(delay.seconds)
    if fault is not None:  # EC2 ran the call; its answer is lost
        return fault_response(self, fault)
    return answer


def _failed(answer: Any) -> bool:
    return isinstance(answer, tuple) and int(answer[0]) >= 400


# S3 object calls do not pass through `call_action`; the names are the API's, so a fault
# armed for PutObject reaches the Pulumi CLI writing a stack's checkpoint.
_S3_OBJECT_ACTIONS: Final = {
    "GET": "GetObject",
    "HEAD": "HeadObject",
    "PUT": "PutObject",
    "DELETE": "DeleteObject",
}


def s3_key_response(self: Any, request: Any, full_url: str, headers: Any) -> Any:
    """P1 for S3 objects: the same fault and delay switches as every other call."""
    action = _S3_OBJECT_ACTIONS.get(str(request.method), "")
    if action == "PutObject" and "x-amz-copy-source" in request.headers:
        action = "CopyObject"
    client = access_key_of(request)
    delay = EMULATOR.take_delay(action, client) if action and EMULATOR.has_delays() else None
    if delay is not None and not delay.after:
        time.sleep(delay.seconds)
    fault = EMULATOR.take_fault(action, client) if action and EMULATOR.has_faults() else None
    if fault is not None and not fault.after:
        return s3_fault_response(fault)
    answer = original(S3Response, "key_response")(self, request, full_url, headers)
    if delay is not None and delay.after:
        time.sleep(delay.seconds)
    if fault is not None:  # S3 stored or served the object; its answer is lost
        return s3_fault_response(fault)
    return answer
