"""A stateful stand-in for `api.ami_policy.ImageOwners`: images by id with their owners.

`owned_by_caller` lists the images the caller's own account owns (what EC2 answers for
Owners=["self"]); `failing` makes every question raise `ImageLookupError` (EC2 unreachable).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.api.ami_policy import ImageLookupError, ImageOwnership


@dataclass
class FakeImageOwners:
    images: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    owned_by_caller: set[str] = field(default_factory=set)
    failing: str | None = None
    asked: list[str] = field(default_factory=list)

    def add(
        self, image_id: str, owner_id: str, alias: str | None = None, *, mine: bool = False
    ) -> None:
        self.images[image_id] = (owner_id, alias)
        if mine:
            self.owned_by_caller.add(image_id)

    def reset(self) -> None:
        self.images.clear()
        self.owned_by_caller.clear()
        self.failing = None
        self.asked.clear()

    def ownership(self, image_id: str, owners: tuple[str, ...]) -> ImageOwnership | None:
        self.asked.append(image_id)
        if self.failing is not None:
            raise ImageLookupError(self.failing)
        if image_id not in self.images:
            return None
        owner_id, alias = self.images[image_id]
        allowed_as = next(
            (
                o
                for o in owners
                if o == owner_id
                or (alias is not None and o == alias)
                or (o == "self" and image_id in self.owned_by_caller)
            ),
            None,
        )
        return ImageOwnership(image_id, owner_id, alias, allowed_as)
