"""The shared storage, asserted on the synthesized templates: the storage stack of the shipped prod (PERSISTENT_2 linked
to a bucket it creates) and of the matrix entries (tests/stacks/matrix.py: spot-p4d with a customer managed key,
asg-g5 deleted with its stack and linked to a named bucket, small-g5 SCRATCH_2 with no S3 link), the existing file
system of request-p4de, and what the cluster stack adds for each: the Lustre ports, the node tag with the mount
source and the node role's access to the data repository's prefix."""

from __future__ import annotations

import json

import pytest

from tests.stacks.test_matrix_stacks import of_type

RETAINED = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
# TCP 988 and 1018-1023, the Lustre ports of the FSx for Lustre user guide (limit-access-security-groups.html).
LUSTRE_PORTS = [(988, 988), (1018, 1023)]
NODE_GROUP = {"Fn::GetAtt": ["EfaSecurityGroup84B158D9", "GroupId"]}


def only(template: dict, resource_type: str) -> tuple[str, dict]:
    (found,) = of_type(template, resource_type).items()
    return found


def policies(resource: dict) -> dict:
    return {key: resource[key] for key in ("DeletionPolicy", "UpdateReplacePolicy") if key in resource}


def stack_properties(assembly, name: str) -> dict:
    return assembly.manifest["artifacts"][name]["properties"]


def stack_dependencies(assembly, name: str) -> list[str]:
    return [d for d in assembly.manifest["artifacts"][name]["dependencies"] if not d.endswith(".assets")]


def ports(rules: dict) -> list[tuple[int, int]]:
    return sorted((rule["Properties"]["FromPort"], rule["Properties"]["ToPort"]) for rule in rules.values())


def s3_statements(template: dict) -> list[dict]:
    """The statements of the template's IAM policies that allow S3 actions."""
    return [
        statement
        for policy in of_type(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if any(
            str(action).startswith("s3:")
            for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
        )
    ]


def reads_the_operator_scripts(statement: dict) -> bool:
    """Every node's read of the operator scripts' archive in the CDK assets bucket
    (tests/stacks/constructs/test_operator_scripts.py), which is not shared storage."""
    return statement["Action"] == "s3:GetObject" and ":s3:::cdk-hnb659fds-assets-" in json.dumps(statement["Resource"])


def test_prods_file_system_is_persistent_2_of_the_environment_file(assembly):
    template = assembly.template_json("gpufleet-prod-storage")
    _, file_system = only(template, "AWS::FSx::FileSystem")

    assert file_system["Properties"]["FileSystemType"] == "LUSTRE"
    assert file_system["Properties"]["FileSystemTypeVersion"] == "2.15"
    assert file_system["Properties"]["StorageCapacity"] == 2400
    assert file_system["Properties"]["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
        "DataCompressionType": "LZ4",
    }
    # In the node subnet of prod's network stack.
    assert file_system["Properties"]["SubnetIds"] == [
        {"Fn::ImportValue": "gpufleet-prod-network:ExportsOutputRefVpcnodesSubnet1Subnet50682361B65FB99F"}
    ]


def test_elastics_file_system_is_the_smallest_lustre_file_system_linked_to_its_bucket(assembly):
    """environments/elastic.yaml: 1200 GiB, the smallest size FSx for Lustre takes, at PERSISTENT_2's lowest throughput,
    its data folder linked to the bucket the stack makes."""
    template = assembly.template_json("gpufleet-elastic-storage")
    _, file_system = only(template, "AWS::FSx::FileSystem")
    _, association = only(template, "AWS::FSx::DataRepositoryAssociation")

    assert file_system["Properties"]["StorageCapacity"] == 1200
    assert file_system["Properties"]["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 125,
        "DataCompressionType": "LZ4",
    }
    assert association["Properties"]["FileSystemPath"] == "/data"
    assert (
        association["Properties"]["DataRepositoryPath"] == "s3://gpufleet-elastic-123456789012-us-east-1/elastic/data/"
    )


def test_retained_storage_survives_destroy_and_replacement_and_its_stack_is_protected(assembly):
    template = assembly.template_json("gpufleet-prod-storage")

    kept = {logical_id: policies(resource) for logical_id, resource in template["Resources"].items()}
    assert kept == {
        "FileSystemSecurityGroupBFA44C6B": RETAINED,
        "FileServersTcp988": RETAINED,
        "FileServersTcp1018": RETAINED,
        "FileSystem": RETAINED,
        "DataRepositoryAssociation": RETAINED,
        "Bucket83908E77": RETAINED,
        "BucketPolicyE9A3008A": RETAINED,
    }
    assert stack_properties(assembly, "gpufleet-prod-storage")["terminationProtection"] is True
    assert stack_properties(assembly, "gpufleet-prod-cluster")["terminationProtection"] is False


def test_on_destroy_delete_deletes_the_file_system_and_leaves_the_stack_unprotected(matrix_assembly):
    template = matrix_assembly.template_json("gpufleet-asg-g5-storage")

    kept = {logical_id: policies(resource) for logical_id, resource in template["Resources"].items()}
    assert kept == {
        "FileSystemSecurityGroupBFA44C6B": {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"},
        "FileServersTcp988": {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"},
        "FileServersTcp1018": {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"},
        "FileSystem": {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"},
        "DataRepositoryAssociation": {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"},
    }
    assert stack_properties(matrix_assembly, "gpufleet-asg-g5-storage")["terminationProtection"] is False


def test_the_storage_stack_depends_on_no_cluster_and_the_cluster_on_it(assembly, matrix_assembly):
    """Destroying a cluster stack never touches the storage stack; CloudFormation keeps the storage stack while a
    cluster imports from it."""
    assert stack_dependencies(assembly, "gpufleet-prod-storage") == ["gpufleet-prod-network"]
    assert stack_dependencies(assembly, "gpufleet-prod-cluster") == ["gpufleet-prod-network", "gpufleet-prod-storage"]
    assert "-cluster:" not in assembly.template_file("gpufleet-prod-storage").read_text()
    assert stack_dependencies(matrix_assembly, "gpufleet-request-p4de-cluster") == []


@pytest.mark.parametrize(
    ("name", "key"), [("prod", None), ("spot-p4d", KEY), ("small-g5", None)], ids=["fsx-key", "customer-key", "scratch"]
)
def test_the_file_system_is_encrypted_with_the_fsx_key_or_the_named_one(assembly, matrix_assembly, name, key):
    """FSx for Lustre encrypts every file system at rest ("Encryption of data at rest is automatically enabled",
    FSx for Lustre user guide, using-fsx-lustre.html); KmsKeyId only chooses the key."""
    source = assembly if name == "prod" else matrix_assembly
    _, file_system = only(source.template_json(f"gpufleet-{name}-storage"), "AWS::FSx::FileSystem")
    assert file_system["Properties"].get("KmsKeyId") == key


def test_the_created_bucket_is_encrypted_private_tls_only_and_named_after_the_environment(assembly):
    template = assembly.template_json("gpufleet-prod-storage")
    _, bucket = only(template, "AWS::S3::Bucket")
    _, policy = only(template, "AWS::S3::BucketPolicy")

    assert bucket["Properties"]["BucketName"] == "gpufleet-prod-123456789012-us-east-1"
    assert bucket["Properties"]["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert bucket["Properties"]["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert (statement["Effect"], statement["Action"], statement["Condition"]) == (
        "Deny",
        "s3:*",
        {"Bool": {"aws:SecureTransport": "false"}},
    )


@pytest.mark.parametrize(
    ("name", "path", "imports", "exports", "bucket_created"),
    [
        (
            "prod",
            "s3://gpufleet-prod-123456789012-us-east-1/prod/data/",
            ["NEW", "CHANGED", "DELETED"],
            ["NEW", "CHANGED", "DELETED"],
            True,
        ),
        ("asg-g5", "s3://inference-datasets/clusters/asg-g5/data/", ["NEW", "CHANGED"], ["NEW"], False),
    ],
)
def test_the_association_links_the_data_folder_to_the_prefixs_data_folder(
    assembly, matrix_assembly, name, path, imports, exports, bucket_created
):
    """/data, not the file system's root: the cluster user's home and the runs' folders stay out of S3 both ways
    (tests/stacks/test_exported_paths.py)."""
    source = assembly if name == "prod" else matrix_assembly
    template = source.template_json(f"gpufleet-{name}-storage")
    _, association = only(template, "AWS::FSx::DataRepositoryAssociation")

    assert association["Properties"] == {
        "FileSystemId": {"Ref": "FileSystem"},
        "FileSystemPath": "/data",
        "DataRepositoryPath": path,
        "BatchImportMetaDataOnCreate": True,
        "S3": {"AutoImportPolicy": {"Events": imports}, "AutoExportPolicy": {"Events": exports}},
        "Tags": association["Properties"]["Tags"],
    }
    assert bool(of_type(template, "AWS::S3::Bucket")) == bucket_created
    # The association names the bucket it links: it waits for a bucket the stack creates, and its policy.
    assert sorted(association.get("DependsOn", [])) == (
        ["Bucket83908E77", "BucketPolicyE9A3008A"] if bucket_created else []
    )


def test_a_file_system_without_a_data_repository_has_no_association_bucket_or_node_access(matrix_assembly):
    assert not of_type(
        matrix_assembly.template_json("gpufleet-small-g5-storage"), "AWS::FSx::DataRepositoryAssociation"
    )
    assert not of_type(matrix_assembly.template_json("gpufleet-small-g5-storage"), "AWS::S3::Bucket")
    assert not [
        s
        for s in s3_statements(matrix_assembly.template_json("gpufleet-small-g5-cluster"))
        if not reads_the_operator_scripts(s)
    ]


def test_the_file_systems_group_carries_the_description_and_tag_gpufleet_down_finds_it_by(assembly):
    """Once the storage stack is gone, `gpufleet down` finds the group its Retain policy left by these two
    (gpufleet/ops/down.py storage_left_behind), and the file system by the tag."""
    storage = assembly.template_json("gpufleet-prod-storage")
    _, group = only(storage, "AWS::EC2::SecurityGroup")
    _, file_system = only(storage, "AWS::FSx::FileSystem")

    assert group["Properties"]["GroupDescription"] == (
        "gpufleet prod shared file system: Lustre from its file servers and the nodes"
    )
    for resource in (group, file_system):
        assert {"Key": "gpufleet:environment", "Value": "prod"} in resource["Properties"]["Tags"]


def test_the_lustre_ports_open_between_the_file_servers_and_from_the_node_security_group_only(assembly):
    storage = assembly.template_json("gpufleet-prod-storage")
    cluster = assembly.template_json("gpufleet-prod-cluster")
    group_id, group = only(storage, "AWS::EC2::SecurityGroup")
    file_system_group = {"Fn::GetAtt": [group_id, "GroupId"]}
    imported_group = {
        "Fn::ImportValue": "gpufleet-prod-storage:ExportsOutputFnGetAttFileSystemSecurityGroupBFA44C6BGroupIdFB0241E9"
    }

    assert "SecurityGroupIngress" not in group["Properties"]
    in_storage = of_type(storage, "AWS::EC2::SecurityGroupIngress")
    assert {rule["Properties"]["SourceSecurityGroupId"] == file_system_group for rule in in_storage.values()} == {True}
    assert ports(in_storage) == LUSTRE_PORTS
    into_file_system = {
        logical_id: rule
        for logical_id, rule in of_type(cluster, "AWS::EC2::SecurityGroupIngress").items()
        if rule["Properties"]["GroupId"] == imported_group
    }
    assert {rule["Properties"]["SourceSecurityGroupId"] == NODE_GROUP for rule in into_file_system.values()} == {True}
    assert ports(into_file_system) == LUSTRE_PORTS
    assert {rule["Properties"]["IpProtocol"] for rule in [*in_storage.values(), *into_file_system.values()]} == {"tcp"}


def test_the_nodes_reach_the_file_system_and_it_reaches_them_on_the_lustre_ports(assembly):
    """The node security group allows no outbound traffic but its own and HTTPS (stacks/constructs/
    efa_security_group.py): the Lustre client rules of the FSx user guide are added to it, both ways."""
    cluster = assembly.template_json("gpufleet-prod-cluster")
    imported_group = {
        "Fn::ImportValue": "gpufleet-prod-storage:ExportsOutputFnGetAttFileSystemSecurityGroupBFA44C6BGroupIdFB0241E9"
    }
    egress = {
        logical_id: rule
        for logical_id, rule in of_type(cluster, "AWS::EC2::SecurityGroupEgress").items()
        if rule["Properties"].get("DestinationSecurityGroupId") == imported_group
    }
    ingress = {
        logical_id: rule
        for logical_id, rule in of_type(cluster, "AWS::EC2::SecurityGroupIngress").items()
        if rule["Properties"].get("SourceSecurityGroupId") == imported_group
    }
    assert ports(egress) == ports(ingress) == LUSTRE_PORTS
    assert {rule["Properties"]["GroupId"] == NODE_GROUP for rule in [*egress.values(), *ingress.values()]} == {True}


def test_an_existing_file_systems_group_gets_the_node_rule_and_nothing_else_is_made(matrix_assembly):
    assert "gpufleet-request-p4de-storage" not in matrix_assembly.stack_names
    cluster = matrix_assembly.template_json("gpufleet-request-p4de-cluster")
    into_existing = {
        logical_id: rule
        for logical_id, rule in of_type(cluster, "AWS::EC2::SecurityGroupIngress").items()
        if rule["Properties"]["GroupId"] == "sg-0a1b2c3d"
    }
    assert ports(into_existing) == LUSTRE_PORTS
    assert {rule["Properties"]["SourceSecurityGroupId"] == NODE_GROUP for rule in into_existing.values()} == {True}
    assert not [
        s
        for s in s3_statements(matrix_assembly.template_json("gpufleet-request-p4de-cluster"))
        if not reads_the_operator_scripts(s)
    ]


@pytest.mark.parametrize(
    ("name", "source"),
    [
        (
            "prod",
            {
                "Fn::Join": [
                    "",
                    [
                        {"Fn::ImportValue": "gpufleet-prod-storage:ExportsOutputFnGetAttFileSystemDNSNameCE8DD25A"},
                        "@tcp:/",
                        {
                            "Fn::ImportValue": "gpufleet-prod-storage:"
                            "ExportsOutputFnGetAttFileSystemLustreMountName7691690D"
                        },
                    ],
                ]
            },
        ),
        ("request-p4de", "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh"),
    ],
    ids=["new", "existing"],
)
def test_nodes_are_tagged_with_the_mount_source_and_may_read_their_tags_from_the_metadata(
    assembly, matrix_assembly, name, source
):
    template = (assembly if name == "prod" else matrix_assembly).template_json(f"gpufleet-{name}-cluster")
    _, launch_template = only(template, "AWS::EC2::LaunchTemplate")
    data = launch_template["Properties"]["LaunchTemplateData"]

    assert data["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    tags = {spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec["Tags"]} for spec in data["TagSpecifications"]}
    assert tags["instance"]["gpufleet:lustre-mount"] == source
    assert "gpufleet:lustre-mount" not in tags["volume"] | tags["network-interface"]


def test_a_node_without_shared_storage_keeps_its_tags_out_of_the_metadata(assembly):
    _, launch_template = only(assembly.template_json("gpufleet-dev-cluster"), "AWS::EC2::LaunchTemplate")
    data = launch_template["Properties"]["LaunchTemplateData"]

    assert "InstanceMetadataTags" not in data["MetadataOptions"]
    assert not [t for spec in data["TagSpecifications"] for t in spec["Tags"] if t["Key"] == "gpufleet:lustre-mount"]


@pytest.mark.parametrize(
    ("name", "bucket", "prefix"),
    [("prod", "gpufleet-prod-123456789012-us-east-1", "prod"), ("asg-g5", "inference-datasets", "clusters/asg-g5")],
)
def test_the_node_role_may_use_the_data_repository_prefix_only(assembly, matrix_assembly, name, bucket, prefix):
    template = (assembly if name == "prod" else matrix_assembly).template_json(f"gpufleet-{name}-cluster")

    def arn(resource: str) -> dict:
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{resource}"]]}

    assert [s for s in s3_statements(template) if not reads_the_operator_scripts(s)] == [
        {
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Effect": "Allow",
            "Resource": arn(f"{bucket}/{prefix}/*"),
        },
        {
            "Action": "s3:ListBucket",
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
            "Effect": "Allow",
            "Resource": arn(bucket),
        },
    ]
    (policy,) = [p for p in of_type(template, "AWS::IAM::Policy").values() if "s3:ListBucket" in str(p)]
    assert policy["Properties"]["Roles"] == [{"Ref": "NodeLaunchTemplateNodeRole83326780"}]
