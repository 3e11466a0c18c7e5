"""The project's AWS emulator: moto 5.2.5 extended with what an N-or-0 launcher needs.

`install()` applies the extensions to the moto classes of the current process, once, and
returns the one `EmulatorState` that holds what moto has no place for (the capacity model,
fault switches, idempotency records, pending ENI detaches). Two callers:
- `devenv.emulator.server` (`python -m devenv.emulator`), the server process the integration
  tests and the demo talk to over HTTP (it also exposes `EmulatorState`'s switches under
  `/_emulator/...`);
- unit tests that run moto in-process: `with mock_aws(): install().reset()`.
Both get identical behaviour because both run this code.

Each patch, what moto does without it, and why the project cannot live with that:
P1 `BaseResponse.call_action`: moto answers every call as it comes. The patch serializes
   calls under one lock (the capacity check and the launch must be one step), seeds a
   region on first use, detaches ENIs whose delay has run out, and answers armed fault
   switches before moto sees the call. S3's object calls (`S3Response.key_response`) take
   the same switches under their API names (GetObject, PutObject, DeleteObject, ...).
P2 EC2 RunInstances: moto launches MinCount, ignores MaxCount, ignores ClientToken and has
   no capacity. The patch replays a seen ClientToken's reservation, refuses with
   InsufficientInstanceCapacity (or ReservationCapacityExceeded, for a targeted
   reservation) when fewer than MinCount slots are free (launching nothing), else launches
   min(MaxCount, free); it also applies the launch template's subnet or AZ, which moto
   ignores, so the instance lands where capacity was charged. The short-answer switch makes
   it answer success with fewer than MinCount, so the product's own N-or-0 guard runs.
P3 EC2 CreateFleet, Type=instant: moto launches the whole target on one override, never
   fails and lists one entry per instance. The patch places instances over the overrides
   as capacity allows, honours MinTargetCapacity with SingleAvailabilityZone and
   SingleInstanceType (short of the minimum it launches nothing and answers `Errors`),
   groups InstanceIds per override, tags instances with `aws:ec2:fleet-id`, replays a seen
   ClientToken, and can be told to return fewer instances than asked (the short-answer switch).
   Other fleet types stay moto's.
P4 `EC2Backend.run_instances`: moto creates launch-time ENIs with DeleteOnTermination
   false, so a terminated instance's primary ENI would look like a leak. The patch makes
   launch-created ENIs default to true, as on AWS; ENIs attached later keep false. It also
   notes each launch for the listing lag.
P4b `EC2Backend.describe_instances`: moto's listings are consistent at once; EC2's are
   eventually consistent. With the listing-lag switch armed, a listing (no instance ids)
   leaves out instances launched less than the lag ago; reads by id still see them.
P5 `EC2Backend.terminate_instances`: moto never detaches the ENIs a termination keeps. The
   patch detaches them `eni_detach_delay` seconds of wall time later (at once for 0).
P6 EKS: moto has no access entries and no Pod Identity associations. The patch adds their
   routes to `moto.eks.urls.url_paths` and their handlers to `EKSResponse`.
P7 `TaggedEC2Resource.get_tags`: moto finds one resource's tags by scanning every tag of
   the region through `describe_tags` and a regex per resource, so listing n tagged
   instances costs O(n^2) (25 s for 1,000 instances; the reaper's 10,000 would take hours).
   The patch reads the resource's own entry of the same tag table: same answer, O(tags).
P8 `Attachment.__init__`: moto shows every attachment on network card 0; the patch shows the
   interface's own card (see `interfaces`). P8b `EC2Backend.attach_network_interface`:
   moto attaches to an instance in any state; the patch refuses one that is not running
   or stopped with IncorrectInstanceState, as EC2 does.
P9 EC2 actions moto lacks (see `ec2_actions`): DescribeCapacityReservations and
   Create/Describe/DeletePlacementGroup, over the emulator's own records; RunInstances and
   instant fleets consume reservations, record placement groups, EFA interfaces on every
   network card, and log each request as received (`launch_requests`).
P10 STS AssumeRole and KMS (see `identity`): moto hands out credentials for any role ARN
   and encrypts with a disabled key. The patch refuses AssumeRole unless the role exists and
   its trust policy allows the caller (AWS principals only), and refuses Encrypt, Decrypt
   and GenerateDataKey with a Disabled key or one PendingDeletion, as AWS does.
P11-P13 (see `hot_paths`): moto's answers at less cost. S3 listings under a prefix look
   at the keys under it, not at every key of the bucket; each response class's handlers
   are listed once, not on every call; an answer works out once per field, not once per
   object, which attribute holds the field. P15 (also there): a filtered instance listing
   makes each tag filter's patterns once, not once per instance, and reads one tag, not
   the instance's whole tag list. P16 (`instance_reads`): a read of an instance by id, and
   a listing by ids, copy only the reservations the answer keeps, not every one.
P14 the caller's IAM policy and DryRun for the launch calls (see `authorization`): moto
   answers any caller, and DryRun before reading the request with HTTP 400. RunInstances,
   instant CreateFleet and CreateLaunchTemplate are refused with UnauthorizedOperation
   (403, an encoded message STS DecodeAuthorizationMessage decodes) unless the caller's
   identity policy allows them (actions only: no resources or conditions), and with DryRun
   answer DryRunOperation (412) once authorized (a permission check, as EC2 documents;
   `set_dry_run_validation(True)`: after their own validation), launching nothing. A launch
   with a security group of another VPC than its subnet is refused with InvalidParameter.
Seeding (no patch): per region, the EKS-optimized AL2023 AMIs (one per Kubernetes version,
architecture and variant, with the matching architecture) and their SSM parameters under
`/aws/service/eks/optimized-ami/...`, plus one default subnet in every AZ.

Limits kept on purpose: fleets count every instance as one unit of capacity (no weights);
reservations are created through the control API only (no CreateCapacityReservation or
PurchaseCapacityBlock) and are targeted by id, not through resource groups.

Where each part lives: `model` (defaults, input errors, shared checks), `state` (`EmulatorState`
and `EMULATOR`), `faults` (switches), `reserved` (reservations, placement groups, the wall
clock and the launch log), `reservations` and `placement` (their records), `seeding`,
`run_instances` (P2), `instances` (P4, P5, P7), `fleet_plan`, `fleet_reserved` and `fleet`
(P3), `launch` and `interfaces` (what a launch leaves on its instances, P8), `ec2_actions`
(P9), `eks` and `eks_cluster` (P6 and registration), `identity` (P10), `hot_paths` (P11-
P13, P15), `instance_reads` (P16), `instance_events`
(the numbered launches and terminations the node simulator reads), `patching` and
`install` (P1), and for the process: `server` (control API), `client` (`EmulatorProcess`,
`EmulatorClient`).
"""

from devenv.emulator.client import EmulatorClient, EmulatorControlError, EmulatorProcess
from devenv.emulator.faults import Fault, ShortAnswer
from devenv.emulator.fleet_plan import FleetRequest, FleetSlot, plan_fleet
from devenv.emulator.install import install
from devenv.emulator.model import (
    DEFAULT_CLUSTER_VERSION,
    DEFAULT_FREE_SLOTS,
    DEFAULT_REGION,
    DEFAULT_SERVICE_CIDR,
    FLEET_ID_TAG,
    ClusterSpec,
    EmulatorInputError,
    RegionSeed,
    insufficient_capacity_message,
)
from devenv.emulator.placement import PlacementGroup
from devenv.emulator.reservations import CapacityReservation
from devenv.emulator.seeding import (
    EKS_AMI_ARCHITECTURES,
    EKS_AMI_K8S_VERSIONS,
    EKS_AMI_OWNER_ID,
    EKS_AMI_VARIANTS,
    eks_ami_id,
    eks_ami_matrix,
    eks_ami_parameter_name,
)
from devenv.emulator.state import EMULATOR, EmulatorState

__all__ = [
    "DEFAULT_CLUSTER_VERSION",
    "DEFAULT_FREE_SLOTS",
    "DEFAULT_REGION",
    "DEFAULT_SERVICE_CIDR",
    "EKS_AMI_ARCHITECTURES",
    "EKS_AMI_K8S_VERSIONS",
    "EKS_AMI_OWNER_ID",
    "EKS_AMI_VARIANTS",
    "EMULATOR",
    "FLEET_ID_TAG",
    "CapacityReservation",
    "ClusterSpec",
    "EmulatorClient",
    "EmulatorControlError",
    "EmulatorInputError",
    "EmulatorProcess",
    "EmulatorState",
    "Fault",
    "FleetRequest",
    "FleetSlot",
    "PlacementGroup",
    "RegionSeed",
    "ShortAnswer",
    "eks_ami_id",
    "eks_ami_matrix",
    "eks_ami_parameter_name",
    "install",
    "insufficient_capacity_message",
    "plan_fleet",
]
