"""Images built by gpufleet (owner self, tag key gpufleet:profile): what uses them, and which ones pruning removes.

An image is in use when an SSM parameter under /gpufleet/ami/ holds its id, or when the default or latest version
of ANY launch template in the region names it (all templates, not only gpufleet's: an image someone else launches
from must not vanish either). Pruning never touches an image in use, nor one still being built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

PROFILE_TAG = "gpufleet:profile"
SSM_AMI_PATH = "/gpufleet/ami/"

Action = Literal["keep-newest", "keep-in-use", "keep-pending", "deregister"]


@dataclass(frozen=True)
class Image:
    image_id: str
    name: str
    profile: str
    created: str  # ISO 8601 as EC2 reports it; sorts chronologically as text
    state: str
    snapshot_ids: tuple[str, ...]
    used_by: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**vars(self), "snapshot_ids": list(self.snapshot_ids), "used_by": list(self.used_by)}


@dataclass(frozen=True)
class PruneStep:
    image: Image
    action: Action


def image_references(ec2: Any, ssm: Any) -> dict[str, list[str]]:
    """AMI id -> what references it ("ssm:/gpufleet/ami/NAME", "launch-template:NAME (lt-...) vN")."""
    references: dict[str, list[str]] = {}
    for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=SSM_AMI_PATH, Recursive=True):
        for parameter in page["Parameters"]:
            references.setdefault(parameter["Value"], []).append(f"ssm:{parameter['Name']}")
    for page in ec2.get_paginator("describe_launch_templates").paginate():
        for template in page["LaunchTemplates"]:
            versions = ec2.describe_launch_template_versions(
                LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Default", "$Latest"], ResolveAlias=True
            )["LaunchTemplateVersions"]
            for version in {v["VersionNumber"]: v for v in versions}.values():
                image_id = version.get("LaunchTemplateData", {}).get("ImageId")
                if image_id:
                    label = f"launch-template:{template['LaunchTemplateName']} ({template['LaunchTemplateId']})"
                    references.setdefault(image_id, []).append(f"{label} v{version['VersionNumber']}")
    return references


def gpufleet_images(ec2: Any, references: dict[str, list[str]], profile: str | None = None) -> list[Image]:
    """gpufleet's images, by profile then newest first."""
    tag_filter = (
        {"Name": f"tag:{PROFILE_TAG}", "Values": [profile]} if profile else {"Name": "tag-key", "Values": [PROFILE_TAG]}
    )
    pages = ec2.get_paginator("describe_images").paginate(Owners=["self"], Filters=[tag_filter])
    images = []
    for image in (image for page in pages for image in page["Images"]):
        tags = {tag["Key"]: tag["Value"] for tag in image.get("Tags", [])}
        snapshots = tuple(
            mapping["Ebs"]["SnapshotId"]
            for mapping in image.get("BlockDeviceMappings", [])
            if mapping.get("Ebs", {}).get("SnapshotId")
        )
        images.append(
            Image(
                image_id=image["ImageId"],
                name=image.get("Name", ""),
                profile=tags[PROFILE_TAG],
                created=image.get("CreationDate", ""),
                state=image["State"],
                snapshot_ids=snapshots,
                used_by=tuple(references.get(image["ImageId"], ())),
            )
        )
    return sorted(_newest_first(images), key=lambda i: i.profile)


def _newest_first(images: list[Image]) -> list[Image]:
    return sorted(images, key=lambda i: (i.created, i.image_id), reverse=True)


def plan_prune(images: list[Image], keep: int) -> list[PruneStep]:
    """Per profile keep the newest `keep`; of the older ones deregister those not in use and not pending.

    Steps come back with every keep first, then the deregistrations oldest first (the order they run in).
    """
    kept: list[PruneStep] = []
    removed: list[PruneStep] = []
    by_profile: dict[str, list[Image]] = {}
    for image in images:
        by_profile.setdefault(image.profile, []).append(image)
    for members in by_profile.values():
        for position, image in enumerate(_newest_first(members)):
            if position < keep:
                kept.append(PruneStep(image, "keep-newest"))
            elif image.used_by:
                kept.append(PruneStep(image, "keep-in-use"))
            elif image.state == "pending":
                kept.append(PruneStep(image, "keep-pending"))
            else:
                removed.append(PruneStep(image, "deregister"))
    removed.sort(key=lambda step: (step.image.created, step.image.image_id))
    return kept + removed


def apply_prune(ec2: Any, steps: list[PruneStep], progress: Callable[[str], None]) -> None:
    """Deregister each image, then delete its snapshots (EC2 refuses to delete a snapshot of a registered image)."""
    for step in steps:
        if step.action != "deregister":
            continue
        progress(f"deregistering {step.image.image_id} ({step.image.name})")
        ec2.deregister_image(ImageId=step.image.image_id)
        for snapshot_id in step.image.snapshot_ids:
            progress(f"deleting snapshot {snapshot_id}")
            ec2.delete_snapshot(SnapshotId=snapshot_id)
