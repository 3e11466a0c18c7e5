"""EC2 refuses tag keys in the `aws:` prefix from callers; moto accepts them.

"Tag your Amazon EC2 resources" (Amazon EC2 User Guide, "Tag restrictions"): the `aws:`
prefix is reserved for AWS use; a caller can neither set nor edit nor delete a tag key
with it (in any case: `AWS:`, `Aws:`). EC2 itself writes such keys at launch
(`aws:ec2launchtemplate:id`, `aws:ec2:fleet-id`), and those are what make them evidence:
nobody but EC2 can put them on an instance. moto applies whatever it is sent, so without
this check a test could "forge" a system tag that AWS would have refused.

Checked once for every EC2 call, on the query parameters that carry a tag key:
`Tag.N.Key` (CreateTags, DeleteTags) and `TagSpecification.N.Tag.M.Key` (RunInstances,
CreateFleet, CreateLaunchTemplate and every other create that tags at creation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from devenv.emulator.faults import Fault

RESERVED_PREFIX: Final = "aws:"
_TAG_KEY_PARAM: Final = re.compile(r"(^|\.)Tag\.\d+\.Key$")


def reserved_tag_refusal(action: str, query: Mapping[str, Sequence[str]]) -> Fault | None:
    """EC2's InvalidParameterValue for the first tag key in the reserved prefix, if any."""
    for name, values in query.items():
        if not _TAG_KEY_PARAM.search(name):
            continue
        for key in values:
            if str(key).lower().startswith(RESERVED_PREFIX):
                return Fault(
                    action=action,
                    code="InvalidParameterValue",
                    message=f"Value ( {key} ) for parameter key is invalid. Tag keys "
                    "starting with 'aws:' are reserved for internal use",
                    status=400,
                    remaining=1,
                )
    return None
