"""The shared storage rules (gpufleet/environment.py for one field, gpufleet/validators/storage.py for more): sizes,
throughputs and keys FSx takes per deployment type, S3 names, the choice of file system and where it is mounted;
each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import pytest

from gpufleet.loading import load_environment
from tests.gpufleet.environment_files import changed, problems_of, write

LUSTRE = {"storage.lustre.deployment_type": "PERSISTENT_2", "storage.lustre.throughput_mb_per_tib": 125}
EXISTING = {
    "storage.existing": {
        "file_system_id": "fs-0123456789abcdef0",
        "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "mount_name": "abcdefgh",
        "security_group_id": "sg-0123456789abcdef0",
    }
}
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.mark.parametrize(
    "changes",
    [
        LUSTRE,
        {**LUSTRE, "storage.lustre.storage_capacity_gib": 2400},
        {**LUSTRE, "storage.lustre.storage_capacity_gib": 9600, "storage.lustre.kms_key_arn": KEY},
        {"storage.lustre.deployment_type": "PERSISTENT_1", "storage.lustre.throughput_mb_per_tib": 200},
        {"storage.lustre.deployment_type": "SCRATCH_2", "storage.data_repository": {}},
        {
            **LUSTRE,
            "storage.data_repository": {"bucket": "my.data-bucket", "prefix": "training/lab", "export_events": []},
        },
        EXISTING,
        {**EXISTING, "storage.mount_path": "/scratch-shared", "tags": {"team": "ml", "cost:center": "a+b=c@d"}},
    ],
    ids=["p2", "p2-2400", "p2-key", "p1", "scratch-created-bucket", "named-bucket", "existing", "existing-tags"],
)
def test_valid_storage_loads(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).storage is not None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {**LUSTRE, "storage.lustre.storage_capacity_gib": 3600},
            "storage.lustre.storage_capacity_gib: 3600 GiB is not a size FSx for Lustre takes (1200, 2400 or a "
            "multiple of 2400: 2400 or 4800)",
        ),
        (
            {**LUSTRE, "storage.lustre.storage_capacity_gib": 1800},
            "storage.lustre.storage_capacity_gib: 1800 GiB is not a size FSx for Lustre takes (1200, 2400 or a "
            "multiple of 2400: 1200 or 2400)",
        ),
        (
            {**LUSTRE, "storage.lustre.storage_capacity_gib": 1000},
            "storage.lustre.storage_capacity_gib: 1000 GiB is below the smallest FSx for Lustre file system, 1200 GiB",
        ),
        (
            {"storage.lustre.deployment_type": "SCRATCH_1"},
            "storage.lustre.deployment_type: 'SCRATCH_1' is not a Lustre deployment type (allowed: PERSISTENT_2, "
            "PERSISTENT_1, SCRATCH_2)",
        ),
        (
            {**LUSTRE, "storage.lustre.compression": "ZSTD"},
            "storage.lustre.compression: 'ZSTD' is not a Lustre data compression (allowed: LZ4, NONE)",
        ),
        (
            {**LUSTRE, "storage.lustre.kms_key_arn": "alias/fsx"},
            "storage.lustre.kms_key_arn: 'alias/fsx' is not a KMS key ARN (e.g. "
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"bucket": "My_Bucket"}},
            "storage.data_repository.bucket: 'My_Bucket' is not an S3 bucket name (3-63 lower-case letters, digits, "
            "dots and hyphens, starting and ending with a letter or digit; no '..', no IP address, no reserved prefix "
            "or suffix such as xn-- or -s3alias)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"bucket": "data-s3alias"}},
            "storage.data_repository.bucket: 'data-s3alias' is not an S3 bucket name (3-63 lower-case letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit; no '..', no IP address, no "
            "reserved prefix or suffix such as xn-- or -s3alias)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"bucket": "192.168.1.10"}},
            "storage.data_repository.bucket: '192.168.1.10' is not an S3 bucket name (3-63 lower-case letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit; no '..', no IP address, no "
            "reserved prefix or suffix such as xn-- or -s3alias)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"prefix": "/training/lab/"}},
            "storage.data_repository.prefix: '/training/lab/' is not a key prefix gpufleet takes (segments of "
            "letters, digits and ! - _ . ' ( ) joined by '/', no leading or trailing '/', no '.' or '..' segment, at "
            "most 512 characters; e.g. training/dev)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"prefix": "runs/*"}},
            "storage.data_repository.prefix: 'runs/*' is not a key prefix gpufleet takes (segments of letters, "
            "digits and ! - _ . ' ( ) joined by '/', no leading or trailing '/', no '.' or '..' segment, at most 512 "
            "characters; e.g. training/dev)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"prefix": "runs/../other"}},
            "storage.data_repository.prefix: 'runs/../other' is not a key prefix gpufleet takes (segments of "
            "letters, digits and ! - _ . ' ( ) joined by '/', no leading or trailing '/', no '.' or '..' segment, at "
            "most 512 characters; e.g. training/dev)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"import_events": ["NEW", "NEW"]}},
            "storage.data_repository.import_events: ['NEW', 'NEW'] is not a list of distinct data repository "
            "events (allowed: NEW, CHANGED, DELETED; [] for none)",
        ),
        (
            {**LUSTRE, "storage.data_repository": {"export_events": ["UPDATED"]}},
            "storage.data_repository.export_events: ['UPDATED'] is not a list of distinct data repository events "
            "(allowed: NEW, CHANGED, DELETED; [] for none)",
        ),
        (
            {**LUSTRE, "storage.on_destroy": "snapshot"},
            "storage.on_destroy: 'snapshot' is not a storage deletion policy (allowed: retain, delete)",
        ),
        (
            {**LUSTRE, "storage.mount_path": "fsx"},
            "storage.mount_path: 'fsx' is not an absolute path (e.g. /fsx)",
        ),
        (
            {"storage.existing": {**EXISTING["storage.existing"], "file_system_id": "fsx-0123"}},
            "storage.existing.file_system_id: 'fsx-0123' is not an FSx file system id (e.g. fs-0123456789abcdef0)",
        ),
        (
            {"storage.existing": {**EXISTING["storage.existing"], "mount_name": "too-long-name"}},
            "storage.existing.mount_name: 'too-long-name' is not a Lustre mount name (e.g. abcdefgh)",
        ),
    ],
)
def test_one_field_rules(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"storage.mount_path": "/fsx"},
            "storage: no file system chosen (set lustre for a new FSx for Lustre file system, or existing for one you "
            "have)",
        ),
        (
            {**LUSTRE, **EXISTING},
            "storage: lustre and existing both set (a new file system or an existing one: keep one)",
        ),
        (
            {"storage.lustre.deployment_type": "PERSISTENT_2"},
            "storage.lustre.throughput_mb_per_tib: required for PERSISTENT_2 (MB/s per TiB: 125, 250, 500, 1000)",
        ),
        (
            {"storage.lustre.deployment_type": "PERSISTENT_1", "storage.lustre.throughput_mb_per_tib": 125},
            "storage.lustre.throughput_mb_per_tib: 125 is not a PERSISTENT_1 throughput (allowed: 50, 100, 200)",
        ),
        (
            {"storage.lustre.deployment_type": "PERSISTENT_2", "storage.lustre.throughput_mb_per_tib": 200},
            "storage.lustre.throughput_mb_per_tib: 200 is not a PERSISTENT_2 throughput (allowed: 125, 250, 500, 1000)",
        ),
        (
            {"storage.lustre.deployment_type": "SCRATCH_2", "storage.lustre.throughput_mb_per_tib": 200},
            "storage.lustre.throughput_mb_per_tib: SCRATCH_2 takes no throughput setting (remove it)",
        ),
        (
            {"storage.lustre.deployment_type": "SCRATCH_2", "storage.lustre.kms_key_arn": KEY},
            "storage.lustre.kms_key_arn: SCRATCH_2 is always encrypted with the FSx service key (remove kms_key_arn)",
        ),
        (
            {**LUSTRE, "storage.lustre.kms_key_arn": KEY.replace("us-east-1", "eu-west-1")},
            "storage.lustre.kms_key_arn: the key is in eu-west-1, the file system in us-east-1 (use a key there)",
        ),
        (
            {**EXISTING, "storage.data_repository": {}},
            "storage.data_repository: an existing file system keeps the data repository associations it has "
            "(remove data_repository, or link the file system to S3 where it was made)",
        ),
        (
            {
                "storage.existing": {
                    **EXISTING["storage.existing"],
                    "dns_name": "fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com",
                }
            },
            "storage.existing.dns_name: 'fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com' is not the DNS name of "
            "fs-0123456789abcdef0 (it starts with the file system's id: copy DNSName from aws fsx "
            "describe-file-systems)",
        ),
        (
            {**LUSTRE, "storage.mount_path": "/usr"},
            "storage.mount_path: /usr is a directory of the node's own (use a directory of its own, e.g. /fsx)",
        ),
        (
            {**LUSTRE, "storage.mount_path": "/scratch/shared"},
            "storage.mount_path: /scratch/shared and node.scratch_mount /scratch would be mounted one in or over the "
            "other (keep them apart, e.g. /fsx and /scratch)",
        ),
        (
            {**LUSTRE, "storage.mount_path": "/data", "node.scratch_mount": "/data/scratch"},
            "storage.mount_path: /data and node.scratch_mount /data/scratch would be mounted one in or over the other "
            "(keep them apart, e.g. /fsx and /scratch)",
        ),
        (
            {**LUSTRE, "tags": {"kubernetes.io/cluster": "lab", "cost center": "x", "team": "ml"}},
            "tags: 'cost center', 'kubernetes.io/cluster': with storage, node tags are shown in the instance metadata, "
            "whose keys take only letters, digits and + - = . , _ : @ (rename these tags)",
        ),
    ],
    ids=[
        "none-chosen",
        "both",
        "throughput-missing",
        "p1-throughput",
        "p2-throughput",
        "scratch-throughput",
        "scratch-key",
        "key-region",
        "existing-repository",
        "dns-name-of-another",
        "system-directory",
        "in-scratch",
        "over-scratch",
        "tag-keys",
    ],
)
def test_rules_that_combine_fields(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


def test_the_scratch_mount_is_no_conflict_without_the_scratch_array(tmp_path):
    document = changed({**LUSTRE, "storage.mount_path": "/scratch", "node.raid0_nvme": False})
    assert load_environment(write(tmp_path, document)).storage.mount_path == "/scratch"


def test_tag_keys_are_free_without_storage(tmp_path):
    document = changed({"tags": {"kubernetes.io/cluster": "lab"}})
    assert load_environment(write(tmp_path, document)).tags == {"kubernetes.io/cluster": "lab"}


@pytest.mark.parametrize(
    ("repository", "location"),
    [
        ({}, ("gpufleet-lab-123456789012-us-east-1", "lab")),
        ({"bucket": "team-data", "prefix": "runs/lab"}, ("team-data", "runs/lab")),
        (None, None),
    ],
    ids=["created", "named", "none"],
)
def test_the_data_repository_location(tmp_path, repository, location):
    document = changed({**LUSTRE, "storage.data_repository": repository})
    assert load_environment(write(tmp_path, document)).data_repository_location == location
