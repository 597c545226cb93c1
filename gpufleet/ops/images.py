"""Images built by gpufleet (owner self, tag key gpufleet:profile): what uses them, and which ones pruning removes.

An image is in use when an SSM parameter under /gpufleet/ami/ holds its id, or when the default or latest version
of ANY launch template in the region names it (all templates, not only gpufleet's: an image someone else launches
from must not vanish either). Both fleet backends launch from the environment's launch template at the version its
latest deploy made, so this covers a Spot Fleet and an Auto Scaling group alike. Pruning never touches an image in
use, nor one still being built.

Pruning goes on past a failure: each image and each snapshot gets an outcome, so the operator learns exactly what
was deleted and what is left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.aws import error_code, error_message
from gpufleet.constants import PROFILE_TAG_KEY

SSM_AMI_PATH = "/gpufleet/ami/"

Action = Literal["keep-newest", "keep-in-use", "keep-pending", "deregister"]
ImageStatus = Literal["deregistered", "kept", "failed"]
SnapshotStatus = Literal["deleted", "kept", "failed"]

# DeleteSnapshotReturnCode.ReturnCode, one per snapshot in DeregisterImage's DeleteSnapshotResults: success |
# skipped ("not deleted because it's associated with other AMIs") | missing-permissions | internal-error |
# client-error. source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteSnapshotReturnCode.html
# and the SnapshotReturnCodes enum of botocore 1.44.5 (botocore/data/ec2/2016-11-15/service-2.json).
RETURN_CODE_DELETED = "success"
RETURN_CODE_IN_USE = "skipped"
# DeleteSnapshot's error for a snapshot another registered image still uses ("The snapshot snap-... is currently in
# use by ami-..."). source: EC2 error responses quoted in github.com/Answers4AWS/backup-monkey/issues/10 and
# github.com/sebdah/automated-ebs-snapshots/issues/4; moto 5.2.5 raises the same (moto/ec2/exceptions.py).
SNAPSHOT_IN_USE_ERROR = "InvalidSnapshot.InUse"
IN_USE_BY_ANOTHER_IMAGE = "in use by another image"


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


@dataclass(frozen=True)
class SnapshotOutcome:
    snapshot_id: str
    status: SnapshotStatus
    detail: str = ""  # why it was kept, or what failed

    def line(self) -> str:
        return f"  {self.snapshot_id}: {_with_detail(self.status, self.detail)}"


@dataclass(frozen=True)
class PruneOutcome:
    """What became of one planned step: the image's fate, and for a deregistration each of its snapshots'."""

    step: PruneStep
    status: ImageStatus
    detail: str = ""
    snapshots: tuple[SnapshotOutcome, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status == "failed" or any(snapshot.status == "failed" for snapshot in self.snapshots)

    def lines(self) -> list[str]:
        image = self.step.image
        heading = f"{image.image_id} ({image.name}): {_with_detail(self.status, self.detail)}"
        return [heading, *(snapshot.line() for snapshot in self.snapshots)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "detail": self.detail,
            "snapshots": [vars(snapshot) for snapshot in self.snapshots],
        }


def _with_detail(status: str, detail: str) -> str:
    return f"{status}: {detail}" if detail else status


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
        {"Name": f"tag:{PROFILE_TAG_KEY}", "Values": [profile]}
        if profile
        else {"Name": "tag-key", "Values": [PROFILE_TAG_KEY]}
    )
    # DescribeImages leaves disabled images out unless IncludeDisabled is set, and a disabled image is one to
    # prune. Deprecated images need no flag: their owner always sees them (IncludeDeprecated's documentation).
    # source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DisableImage.html and DescribeImagesRequest
    # in botocore 1.44.5 (botocore/data/ec2/2016-11-15/service-2.json).
    pages = ec2.get_paginator("describe_images").paginate(Owners=["self"], Filters=[tag_filter], IncludeDisabled=True)
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
                profile=tags[PROFILE_TAG_KEY],
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


def apply_prune(ec2: Any, steps: list[PruneStep]) -> Iterator[PruneOutcome]:
    """One outcome per step, in order, as each completes; a failure is reported and the prune goes on."""
    for step in steps:
        if step.action == "deregister":
            yield _deregister(ec2, step)
        elif step.action == "keep-in-use":
            yield PruneOutcome(step, "kept", f"in use by {', '.join(step.image.used_by)}")
        else:
            yield PruneOutcome(step, "kept", step.action.removeprefix("keep-"))


def _deregister(ec2: Any, step: PruneStep) -> PruneOutcome:
    """Deregister the image and let EC2 delete its snapshots in the same call (DeleteAssociatedSnapshots).

    EC2 then leaves a snapshot another image uses alone ("skipped") instead of failing, and a prune cut short
    between deregistration and snapshot deletion cannot leave snapshots that no image points to any more.
    source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeregisterImage.html
    """
    image = step.image
    try:
        response = ec2.deregister_image(ImageId=image.image_id, DeleteAssociatedSnapshots=True)
    except (ClientError, BotoCoreError) as error:
        kept = tuple(
            SnapshotOutcome(snapshot_id, "kept", "image not deregistered") for snapshot_id in image.snapshot_ids
        )
        return PruneOutcome(step, "failed", _failure(error), kept)
    reported = {
        result["SnapshotId"]: result.get("ReturnCode", "") for result in response.get("DeleteSnapshotResults", [])
    }
    snapshots = tuple(
        _from_return_code(snapshot_id, reported[snapshot_id])
        if snapshot_id in reported
        # Not reported (an endpoint that ignores DeleteAssociatedSnapshots, such as moto): delete it here.
        else _delete_snapshot(ec2, snapshot_id)
        for snapshot_id in dict.fromkeys([*image.snapshot_ids, *reported])
    )
    return PruneOutcome(step, "deregistered", snapshots=snapshots)


def _from_return_code(snapshot_id: str, return_code: str) -> SnapshotOutcome:
    if return_code == RETURN_CODE_DELETED:
        return SnapshotOutcome(snapshot_id, "deleted")
    if return_code == RETURN_CODE_IN_USE:
        return SnapshotOutcome(snapshot_id, "kept", IN_USE_BY_ANOTHER_IMAGE)
    return SnapshotOutcome(snapshot_id, "failed", return_code or "no return code")


def _delete_snapshot(ec2: Any, snapshot_id: str) -> SnapshotOutcome:
    try:
        ec2.delete_snapshot(SnapshotId=snapshot_id)
    except ClientError as error:
        if error_code(error) == SNAPSHOT_IN_USE_ERROR:
            return SnapshotOutcome(snapshot_id, "kept", IN_USE_BY_ANOTHER_IMAGE)
        return SnapshotOutcome(snapshot_id, "failed", _failure(error))
    except BotoCoreError as error:
        return SnapshotOutcome(snapshot_id, "failed", _failure(error))
    return SnapshotOutcome(snapshot_id, "deleted")


def _failure(error: Exception) -> str:
    if isinstance(error, ClientError):
        return f"{error_code(error)}: {error_message(error)}"
    return str(error)
