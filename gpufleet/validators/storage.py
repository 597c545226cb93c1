"""Shared storage: which file system, its throughput and key for its deployment type, the S3 link, and where the
nodes mount it."""

from __future__ import annotations

import re

from gpufleet.constants import LUSTRE_PERSISTENT_1, LUSTRE_PERSISTENT_2, LUSTRE_SCRATCH_2
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, ValidationContext

# PerUnitStorageThroughput by deployment type (MB/s/TiB). source: botocore's fsx model,
# CreateFileSystemLustreConfiguration PerUnitStorageThroughput: "Required with PERSISTENT_1 and PERSISTENT_2 deployment
# types using an SSD or HDD storage class ... For PERSISTENT_1 SSD storage: 50, 100, 200 MB/s/TiB ... For PERSISTENT_2
# SSD storage: 125, 250, 500, 1000 MB/s/TiB"; the FSx for Lustre user guide, managing-throughput-capacity.html, lists
# the same values. SCRATCH_2 has none (its baseline is 200 MB/s per TiB: the user guide, using-fsx-lustre.html).
LUSTRE_THROUGHPUTS = {LUSTRE_PERSISTENT_1: (50, 100, 200), LUSTRE_PERSISTENT_2: (125, 250, 500, 1000)}
# Mount points that are the node's own directories: a file system mounted over one hides what the node needs.
SYSTEM_DIRECTORIES = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp"}
    | {"/usr", "/var"}
)
# Tag keys EC2 can show in the instance metadata, which the nodes read the mount source from (SHARED_STORAGE_TAG_KEY):
# EC2 user guide, "View tags for your EC2 instances using instance metadata" (work-with-tags-in-IMDS.html): with tags
# in the metadata allowed, "instance tag keys are subject to specific restrictions. Non-compliance will result in
# failed launches for new instances": only letters, numbers and + - = . , _ : @, no spaces or /, not only "." or
# ".." or "_index".
METADATA_TAG_KEY = re.compile(r"(?!\.{1,2}$|_index$)[A-Za-z0-9+=.,_:@-]+")


class StorageChoiceValidator(EnvironmentValidator):
    field = "storage"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        storage = env.storage
        if storage is None:
            return []
        if storage.lustre is None and storage.existing is None:
            return self.problem(
                "no file system chosen (set lustre for a new FSx for Lustre file system, or existing for one you have)"
            )
        if storage.lustre is not None and storage.existing is not None:
            return self.problem("lustre and existing both set (a new file system or an existing one: keep one)")
        return []


class LustreThroughputValidator(EnvironmentValidator):
    field = "storage.lustre.throughput_mb_per_tib"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        lustre = env.storage.lustre if env.storage else None
        if lustre is None:
            return []
        allowed = LUSTRE_THROUGHPUTS.get(lustre.deployment_type)
        throughput = lustre.throughput_mb_per_tib
        if allowed is None:
            if throughput is not None:
                return self.problem(f"{lustre.deployment_type} takes no throughput setting (remove it)")
            return []
        choices = ", ".join(map(str, allowed))
        if throughput is None:
            return self.problem(f"required for {lustre.deployment_type} (MB/s per TiB: {choices})")
        if throughput not in allowed:
            return self.problem(f"{throughput} is not a {lustre.deployment_type} throughput (allowed: {choices})")
        return []


class LustreKmsKeyValidator(EnvironmentValidator):
    field = "storage.lustre.kms_key_arn"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        lustre = env.storage.lustre if env.storage else None
        if lustre is None or lustre.kms_key_arn is None:
            return []
        # botocore's fsx model, KmsKeyId: "Amazon FSx for Lustre PERSISTENT_1 and PERSISTENT_2 deployment types only.
        # SCRATCH_1 and SCRATCH_2 types are encrypted using the Amazon FSx service KMS key for your account."
        if lustre.deployment_type == LUSTRE_SCRATCH_2:
            return self.problem(f"{LUSTRE_SCRATCH_2} is always encrypted with the FSx service key (remove kms_key_arn)")
        key_region = lustre.kms_key_arn.split(":")[3]
        if key_region != env.region:
            return self.problem(f"the key is in {key_region}, the file system in {env.region} (use a key there)")
        return []


class DataRepositoryValidator(EnvironmentValidator):
    field = "storage.data_repository"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        storage = env.storage
        if storage is None or storage.data_repository is None or storage.existing is None:
            return []
        return self.problem(
            "an existing file system keeps the data repository associations it has (remove data_repository, or "
            "link the file system to S3 where it was made)"
        )


class ExistingDnsNameValidator(EnvironmentValidator):
    field = "storage.existing.dns_name"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        existing = env.storage.existing if env.storage else None
        if existing is None or existing.dns_name.startswith(f"{existing.file_system_id}."):
            return []
        return self.problem(
            f"'{existing.dns_name}' is not the DNS name of {existing.file_system_id} (it starts with the file "
            "system's id: copy DNSName from aws fsx describe-file-systems)"
        )


class SharedMountPathValidator(EnvironmentValidator):
    field = "storage.mount_path"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.storage is None:
            return []
        path = env.storage.mount_path.rstrip("/")
        if path in SYSTEM_DIRECTORIES:
            return self.problem(f"{path} is a directory of the node's own (use a directory of its own, e.g. /fsx)")
        scratch = env.node.scratch_mount.rstrip("/")
        nested = path == scratch or path.startswith(f"{scratch}/") or scratch.startswith(f"{path}/")
        if env.node.raid0_nvme and nested:
            return self.problem(
                f"{path} and node.scratch_mount {scratch} would be mounted one in or over the other (keep them apart, "
                "e.g. /fsx and /scratch)"
            )
        return []


class MetadataTagKeysValidator(EnvironmentValidator):
    """With shared storage the nodes read their mount source from the instance metadata, which the launch template
    then opens to instance tags: EC2 refuses instance tags whose keys the metadata cannot show."""

    field = "tags"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.storage is None:
            return []
        unusable = [key for key in env.tags if not METADATA_TAG_KEY.fullmatch(key)]
        if not unusable:
            return []
        return self.problem(
            f"{', '.join(repr(key) for key in unusable)}: with storage, node tags are shown in the instance metadata, "
            "whose keys take only letters, digits and + - = . , _ : @ (rename these tags)"
        )
