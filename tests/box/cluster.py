"""A shipped environment's cluster in the box: its stacks synthesized for real, its nodes booted from the launch
template's own user data on real systemd nodes, AWS answered by the emulator (tests/box/aws.py).

What stands in for what (docs/development/cluster-in-a-box.md says it for users):
- `cdk deploy`: the box publishes the cluster stack's file assets to the emulated CDK assets bucket (as cdk-assets does
  with the stack's assets manifest), makes the cluster user's key with the cluster-user handler's own code
  (stacks/constructs/cluster_user/runtime/handler.py, on_event with a Create request), and records a Spot Fleet
  request; CloudFormation itself does not run.
- EC2's fleet (launching, replacing, interrupting instances): BoxCluster.launch and interrupt. This is AWS behaviour
  nothing offline reproduces: the box launches what a test asks for, with RunInstances against the emulator (spot
  through InstanceMarketOptions, as EC2 marks them), tagged as the launch template tags instances plus
  aws:ec2spot:fleet-request-id, the box's record of the fleet (tests/box/fleet_emulation.py).
- An instance: a box node with the instance's id, address, MAC and lifecycle in its metadata service, the launch
  template's MetadataOptions (HttpTokens, InstanceMetadataTags) and instance tags, its user data and the node role's
  credentials.
- The image: the box's root file system and image layer (tests/box/rootfs.py, tests/box/image/), with
  /etc/gpufleet/versions.json as the image build's 17-validate.sh writes it for the environment's profile.
- FSx for Lustre: a host directory bound at the mount point of every node; the instance store's RAID0: a directory
  of the node's own bound at the scratch mount (the box cannot make block devices).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.ami.profile import parse_profile
from gpufleet.catalog import load_catalog
from gpufleet.constants import (
    ENVIRONMENT_TAG_KEY,
    FILE_SYSTEM_OUTPUT_KEY,
    FLEET_OUTPUT_KEY,
    READINESS_TAG_KEY,
    STORAGE_BUCKET_OUTPUT_KEY,
    STORAGE_RETAIN,
    STORAGE_SECURITY_GROUP_DESCRIPTION,
)
from gpufleet.environment import Environment
from gpufleet.loading import load_environment
from gpufleet.user_data import SHARED_DATA_SUBDIR
from tests.box.aws import AwsEmulator, instance_credentials
from tests.box.fsx_emulation import SHARED_DIR_TAG
from tests.box.nodes import Box, Node, NodeSpec, copy_tree
from tests.box.rootfs import ensure_rootfs

REPOSITORY = Path(__file__).resolve().parents[2]
IMAGE_LAYER = REPOSITORY / "tests" / "box" / "image" / "layer"
FIXTURES = REPOSITORY / "tests" / "fixtures"
FLEET_TAG = "aws:ec2spot:fleet-request-id"
NODE_ROLE = "gpufleet-box-node-role"
# The FSx file system the launch template's mount tag names, as the storage stack's exports would give it.
FILE_SYSTEM_DNS = "fs-0123456789abcdef0.fsx.{region}.amazonaws.com"
FILE_SYSTEM_MOUNT_NAME = "boxfsx01"
# p4d.24xlarge's GPU bus ids (tests/scripts/ops/conftest.py's, after the Xid 63 sample of stas00/ml-engineering).
P4D_BUS_IDS = [
    "00000000:10:1C.0",
    "00000000:10:1D.0",
    "00000000:20:1C.0",
    "00000000:20:1D.0",
    "00000000:90:1C.0",
    "00000000:90:1D.0",
    "00000000:A0:1C.0",
    "00000000:A0:1D.0",
]
GPU_NAMES = {"A100": "NVIDIA A100-SXM4-40GB", "H100": "NVIDIA H100 80GB HBM3"}
TOPOLOGY_CAPTURES = {"p4d.24xlarge": "p4d.txt", "p4de.24xlarge": "p4d.txt", "p5.48xlarge": "p5.txt"}


def synthesize_environment(environment_file: Path, directory: Path) -> Path:
    """The environment's stacks synthesized into DIRECTORY as `cdk synth` makes them (tests/conftest.py synthesize)."""
    from tests.conftest import synthesize

    environments = directory / "environments"
    environments.mkdir(parents=True)
    shutil.copy(environment_file, environments)
    synthesize(directory / "cdk.out", environments)
    return directory / "cdk.out"


def resolve(value: Any, known: dict[str, str]) -> Any:
    """A template value with the intrinsic functions a tag uses resolved from KNOWN (imports, attributes)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(resolve(part, known) for part in parts)
    if "Fn::ImportValue" in value:
        return known[value["Fn::ImportValue"]]
    if "Ref" in value:
        return known[value["Ref"]]
    raise ValueError(f"cannot resolve {value}")


@dataclass(frozen=True)
class LaunchTemplate:
    user_data: bytes  # what EC2 hands the instance: the base64-decoded UserData
    http_tokens: str
    metadata_tags: bool
    instance_tags: dict[str, str]

    @classmethod
    def from_template(cls, template: dict[str, Any], known: dict[str, str]) -> LaunchTemplate:
        (resource,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
        data = resource["Properties"]["LaunchTemplateData"]
        options = data["MetadataOptions"]
        (instance,) = [spec for spec in data["TagSpecifications"] if spec["ResourceType"] == "instance"]
        return cls(
            user_data=base64.b64decode(data["UserData"]),
            http_tokens=options["HttpTokens"],
            metadata_tags=options.get("InstanceMetadataTags") == "enabled",
            instance_tags={tag["Key"]: resolve(tag["Value"], known) for tag in instance["Tags"]},
        )


class BoxCluster:
    """ENVIRONMENT_FILE's cluster in DIRECTORY: start() synthesizes, deploys the stand-ins and starts the box; launch()
    boots a node; close() takes everything down."""

    def __init__(self, directory: Path, environment_file: Path, capacity: tuple[int, int] | None = None) -> None:
        """CAPACITY (target, on_demand) replaces the file's capacity in the box's copy, which the box synthesizes and
        the operator commands read: the box boots a few nodes, and `gpufleet up` waits for the environment's target.
        The user data does not depend on the numbers (gpufleet/user_data.py: only whether there is spot)."""
        self.directory = directory
        self.environments_dir = directory / "environments"
        self.environment_file = environment_file
        if capacity is not None:
            self.environment_file = self._with_capacity(environment_file, *capacity)
        self.env: Environment = load_environment(self.environment_file)
        self.instance = load_catalog()[self.env.instance_type]
        network = self.env.network
        # The node subnet: the Vpc construct's first subnet, the lower half of the VPC (stacks/network_stack.py).
        self.subnet = next(ipaddress.IPv4Network(network.cidr).subnets(new_prefix=network.node_subnet_prefix))
        self.box: Box | None = None
        self.aws: AwsEmulator | None = None
        self.fleet_id = ""
        self.subnet_id = ""
        self.vpc_id = ""
        self.image_id = ""
        self.launch_template: LaunchTemplate | None = None
        self.assembly: Path | None = None  # the synthesized cloud assembly, once started

    # -- setting up ------------------------------------------------------------------------------------------------

    def _with_capacity(self, environment_file: Path, target: int, on_demand: int) -> Path:
        import yaml

        document = yaml.safe_load(environment_file.read_text())
        document["capacity"] = {**document["capacity"], "target": target, "on_demand": on_demand}
        copy = self.directory / "capacity" / environment_file.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(yaml.safe_dump(document, sort_keys=False))
        return copy

    def start(self, progress=print, deploy: bool = True) -> None:
        """Synthesize, start the box and its emulator, and (unless deploy=False: `gpufleet up` deploys, through the
        CDK CLI's stand-in tests/box/cdk_stand_in.py) deploy the stand-ins of the stacks."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.environments_dir.mkdir(exist_ok=True)
        shutil.copy(self.environment_file, self.environments_dir)
        progress("box: synthesizing", self.env.name)
        assembly = synthesize_environment(self.environment_file, self.directory / "synth")
        rootfs = ensure_rootfs(progress)
        image = self._image_layer()
        storage = self.env.storage
        self.box = Box(
            self.directory / "box",
            str(self.subnet),
            [image, rootfs],
            self.directory / "shared",
            storage.mount_path if storage else "/box-no-shared-storage",
            self.env.node.scratch_mount,
        )
        self.box.start()
        self.aws = AwsEmulator(self.box, [self.env.region])
        self.aws.start()
        known = {
            f"{self.env.stack_prefix}-storage:ExportsOutputFnGetAttFileSystemDNSNameCE8DD25A": FILE_SYSTEM_DNS.format(
                region=self.env.region
            ),
            f"{self.env.stack_prefix}-storage:ExportsOutputFnGetAttFileSystemLustreMountName7691690D": (
                FILE_SYSTEM_MOUNT_NAME
            ),
        }
        cluster_stack = f"{self.env.stack_prefix}-cluster"
        template = json.loads((assembly / f"{cluster_stack}.template.json").read_text())
        self.launch_template = LaunchTemplate.from_template(template, known)
        (self.directory / "user-data").write_bytes(self.launch_template.user_data)
        self.assembly = assembly
        self._account_state()
        if deploy:
            self.deploy()

    def _account_state(self) -> None:
        """What the account holds before any of the environment's stacks: the service-linked roles Spot Fleet and Spot
        launch with, where AWS puts them (IAM user guide, using-service-linked-roles.html: path
        /aws-service-role/SERVICE/), made by an account's first spot request; and the image's SSM parameter, which the
        AMI pipeline publishes (here the emulator's image, which the box's nodes stand for)."""
        assert self.aws is not None
        iam = self.aws.client("iam")
        for role, service in (
            ("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com"),
            ("AWSServiceRoleForEC2Spot", "spot.amazonaws.com"),
        ):
            iam.create_role(
                Path=f"/aws-service-role/{service}/",
                RoleName=role,
                AssumeRolePolicyDocument=json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
                        ],
                    }
                ),
            )
        ec2 = self.aws.client("ec2")
        self.image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        if self.env.image_parameter:
            self.aws.client("ssm").put_parameter(
                Name=self.env.image_parameter, Value=self.image_id, Type="String", DataType="aws:ec2:image"
            )

    def deploy(self) -> None:
        """What `cdk deploy` of the environment leaves, as far as the box needs it: the storage (below), the network,
        the assets, the cluster user's key, the fleet request, and the cluster stack with the output that names the
        fleet (stacks of no resources of their own in the emulator: moto's CloudFormation creates none of gpufleet's
        resource types)."""
        cluster_stack = f"{self.env.stack_prefix}-cluster"
        assert self.aws is not None and self.assembly is not None, "started"
        self._deploy(self.assembly, cluster_stack)
        if self.env.data_repository_location is not None:
            self._deploy_storage()
        self._stack_stand_in(
            cluster_stack, "EfaSecurityGroup", f"gpufleet {self.env.name} EFA", {FLEET_OUTPUT_KEY: self.fleet_id}
        )

    def _stack_stand_in(
        self, name: str, group: str, description: str, outputs: dict[str, str], protected: bool = False
    ) -> None:
        """A stack in the emulator with its outputs and one resource of the real one that moto's CloudFormation makes:
        its security group (DeletionPolicy Retain where the real one has it)."""
        assert self.aws is not None
        resource: dict = {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {"GroupDescription": description, "VpcId": self.vpc_id},
        }
        if protected:
            resource["DeletionPolicy"] = "Retain"
        self.aws.client("cloudformation").create_stack(
            StackName=name,
            EnableTerminationProtection=protected,
            TemplateBody=json.dumps(
                {
                    "Resources": {group: resource},
                    "Outputs": {key: {"Value": value} for key, value in outputs.items()},
                }
            ),
        )

    def _deploy_storage(self) -> None:
        """The storage stack: the bucket (taken back when an earlier one was kept: cdk deploy
        --import-existing-resources), a file system that is the box's shared folder (tests/box/fsx_emulation.py), its
        data repository association, which imports what the bucket holds under PREFIX/data/ into /data, and the stack
        with its outputs, termination protection on (storage.on_destroy retain)."""
        assert self.aws is not None and self.box is not None
        location = self.env.data_repository_location
        assert location is not None and self.env.storage is not None
        bucket, prefix = location
        s3 = self.aws.client("s3")
        if bucket not in {known["Name"] for known in s3.list_buckets()["Buckets"]}:
            s3.create_bucket(Bucket=bucket)
        fsx = self.aws.client("fsx")
        file_system = fsx.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=self.env.storage.lustre.storage_capacity_gib,
            SubnetIds=[self.subnet_id],
            Tags=[
                {"Key": SHARED_DIR_TAG, "Value": str(self.box.shared_dir)},
                {"Key": ENVIRONMENT_TAG_KEY, "Value": self.env.name},
            ],
        )["FileSystem"]
        repository = self.env.storage.data_repository
        assert repository is not None
        fsx.create_data_repository_association(
            FileSystemId=file_system["FileSystemId"],
            FileSystemPath=f"/{SHARED_DATA_SUBDIR}",
            DataRepositoryPath=f"s3://{bucket}/{prefix}/{SHARED_DATA_SUBDIR}/",
            BatchImportMetaDataOnCreate=True,
            S3={
                "AutoImportPolicy": {"Events": list(repository.import_events)},
                "AutoExportPolicy": {"Events": list(repository.export_events)},
            },
        )
        self._stack_stand_in(
            f"{self.env.stack_prefix}-storage",
            "FileSystemSecurityGroup",
            STORAGE_SECURITY_GROUP_DESCRIPTION.format(name=self.env.name),
            {FILE_SYSTEM_OUTPUT_KEY: file_system["FileSystemId"], STORAGE_BUCKET_OUTPUT_KEY: bucket},
            protected=self.env.storage.on_destroy == STORAGE_RETAIN,
        )

    def destroy(self, stacks: list[str]) -> None:
        """What `cdk destroy` of STACKS does in the box: the cluster stack's nodes power off and their instances
        end, the fleet request goes, the cluster user's secret is deleted with its stack, and the stacks are deleted
        (a stack with termination protection stays, as CloudFormation keeps it)."""
        assert self.aws is not None and self.box is not None
        cloudformation = self.aws.client("cloudformation")
        for stack in stacks:
            if stack == f"{self.env.stack_prefix}-cluster":
                for node in list(self.box.nodes.values()):
                    if node.alive():
                        self.terminate(node)
                if self.fleet_id:
                    # Its instances were ended above, as the box ends them.
                    self.aws.client("ec2").cancel_spot_fleet_requests(
                        SpotFleetRequestIds=[self.fleet_id], TerminateInstances=False
                    )
                self.aws.client("secretsmanager").delete_secret(
                    SecretId=self.env.cluster_user_key_secret_name, ForceDeleteWithoutRecovery=True
                )
            cloudformation.delete_stack(StackName=stack)

    def _image_layer(self) -> Path:
        """The image layer: tests/box/image/layer, the stand-ins' data, versions.json of the environment's profile."""
        image = self.directory / "image"
        copy_tree(IMAGE_LAYER, image)
        # nccl-tests' stand-in, where scripts/ami/10-nccl-tests.sh builds nccl-tests (build/ is git-ignored).
        (image / "opt" / "nccl-tests" / "build").mkdir(parents=True, exist_ok=True)
        shutil.copy(IMAGE_LAYER.parent / "nccl-tests" / "all_reduce_perf", image / "opt" / "nccl-tests" / "build")
        share = image / "usr" / "share" / "box"
        share.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "fi_info" / "p4d_multiple_interfaces.txt", share / "fi_info.txt")
        shutil.copy(FIXTURES / "nccl" / "p4d_2node_all_reduce.log", share / "all_reduce_perf.log")
        copy_tree(FIXTURES / "nvidia-smi" / "h100-driver580", share / "nvidia-smi")
        # Debian's torchrun 1.13 on Python 3.11 needs this mend (its docstring); a run's --setup puts it on PYTHONPATH.
        copy_tree(REPOSITORY / "tests" / "examples" / "debian_torch_shim", share / "debian_torch_shim")
        profile = parse_profile(REPOSITORY / "ami" / "profiles" / f"{self.image_profile}.yaml")
        gpus = {
            "count": self.instance.gpu.count,
            "name": next(name for key, name in GPU_NAMES.items() if key in self.instance.gpu.model),
            "driver": profile.components.driver.version,
            "bus_ids": P4D_BUS_IDS,
            "topology_capture": f"/usr/share/box/{TOPOLOGY_CAPTURES[self.instance.name]}",
        }
        shutil.copy(FIXTURES / "topo" / TOPOLOGY_CAPTURES[self.instance.name], share)
        # The stand-ins' record of their calls, which every user's processes append to (mpirun's ranks run as the
        # cluster user): git keeps no mode but the executable bit, so it is made here.
        calls = image / "var" / "log" / "box-stand-ins.log"
        calls.parent.mkdir(parents=True, exist_ok=True)
        calls.touch()
        calls.chmod(0o666)
        (image / "etc" / "box").mkdir(parents=True, exist_ok=True)
        (image / "etc" / "box" / "gpus.json").write_text(json.dumps(gpus, indent=1))
        (image / "etc" / "gpufleet").mkdir(parents=True, exist_ok=True)
        (image / "etc" / "gpufleet" / "versions.json").write_text(json.dumps(versions_manifest(profile), indent=1))
        return image

    @property
    def image_profile(self) -> str:
        parameter = self.env.image_parameter or ""
        return parameter.rsplit("/", 1)[-1]

    def _deploy(self, assembly: Path, cluster_stack: str) -> None:
        assert self.aws is not None and self.box is not None
        ec2 = self.aws.client("ec2")
        self.vpc_id = vpc = ec2.create_vpc(CidrBlock=str(self.env.network.cidr))["Vpc"]["VpcId"]
        self.subnet_id = ec2.create_subnet(
            VpcId=vpc, CidrBlock=str(self.subnet), AvailabilityZone=self.env.availability_zone
        )["Subnet"]["SubnetId"]
        # cdk deploy's asset publishing: each file asset of the cluster stack, to the bucket and key its manifest names.
        s3 = self.aws.client("s3")
        manifest = json.loads((assembly / f"{cluster_stack}.assets.json").read_text())
        # The bootstrap's asset bucket outlives a cluster: a second deploy finds it.
        buckets = {known["Name"] for known in s3.list_buckets()["Buckets"]}
        for asset in manifest["files"].values():
            if asset["source"]["packaging"] != "file":
                continue
            for destination in asset["destinations"].values():
                bucket = destination["bucketName"]
                if bucket not in buckets:
                    s3.create_bucket(Bucket=bucket)
                    buckets.add(bucket)
                s3.put_object(
                    Bucket=bucket,
                    Key=destination["objectKey"],
                    Body=(assembly / asset["source"]["path"]).read_bytes(),
                )
        # The cluster user's key: the custom resource's own handler, against the emulator.
        secrets = self.aws.client("secretsmanager")
        secrets.create_secret(Name=self.env.cluster_user_key_secret_name)
        self.lambda_handler(
            "cluster_user",
            "on_event",
            {
                "RequestType": "Create",
                "ResourceProperties": {
                    "SecretId": self.env.cluster_user_key_secret_name,
                    "KeyPairPrefix": f"gpufleet-{self.env.name}-cluster-user",
                },
            },
        )
        self.fleet_id = ec2.request_spot_fleet(
            SpotFleetRequestConfig={
                "IamFleetRole": f"arn:aws:iam::{self.env.account}:role/box-fleet-role",
                "TargetCapacity": self.env.capacity.target,
                "OnDemandTargetCapacity": self.env.capacity.on_demand,
                "Type": self.env.fleet.type,
                "AllocationStrategy": self.env.fleet.allocation_strategy,
                "LaunchSpecifications": [],
            }
        )["SpotFleetRequestId"]

    def lambda_handler(self, construct: str, function: str, event: dict[str, Any], **environment: str) -> Any:
        """Run a construct's Lambda handler as Lambda runs it: its runtime folder as the code, its own copy of the
        gpufleet modules, boto3 from the environment, AWS reached through the emulator."""
        assert self.aws is not None
        runtime = REPOSITORY / "stacks" / "constructs" / construct / "runtime"
        code = (
            "import json, sys, handler\n"
            f"print(json.dumps(handler.{function}(json.loads(sys.stdin.read()), None), default=str))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=runtime,
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env={**self.aws.environment(), "PATH": os.environ["PATH"], **environment},
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{construct} handler failed: {done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    # -- nodes -----------------------------------------------------------------------------------------------------

    def launch(
        self,
        market: str = "on-demand",
        extra_addresses: tuple[str, ...] = (),
        files: dict[str, tuple[bytes, int]] | None = None,
    ) -> Node:
        """Launch an instance as the fleet would, and boot its node; FILES (path: (content, mode)) go into the node's
        own layer over the image's (a node whose hardware differs, say)."""
        assert self.aws is not None and self.box is not None and self.launch_template is not None
        ec2 = self.aws.client("ec2")
        tags = {**self.launch_template.instance_tags, FLEET_TAG: self.fleet_id}
        arguments: dict[str, Any] = {
            "ImageId": self.image_id,
            "InstanceType": self.env.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "SubnetId": self.subnet_id,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        }
        if market == "spot":
            arguments["InstanceMarketOptions"] = {"MarketType": "spot"}
        instance = ec2.run_instances(**arguments)["Instances"][0]
        spec = self.node_spec(instance, market, tags, extra_addresses)
        return self.box.boot(spec, {**self.node_files(), **(files or {})})

    def terminate(self, node: Node) -> None:
        """EC2 terminates the instance: its node powers off (systemd stops every unit), and the instance is gone."""
        assert self.aws is not None and self.box is not None
        self.box.power_off(node)
        self.aws.client("ec2").terminate_instances(InstanceIds=[node.instance_id])

    def node_spec(
        self, instance: dict[str, Any], market: str, tags: dict[str, str], extra_addresses: tuple[str, ...]
    ) -> NodeSpec:
        assert self.launch_template is not None
        env = self.env
        address = instance["PrivateIpAddress"]
        mac = instance["NetworkInterfaces"][0]["MacAddress"]
        hostname = "ip-" + address.replace(".", "-") + (".ec2.internal" if env.region == "us-east-1" else "")
        metadata = {
            "ami-id": self.image_id,
            "hostname": hostname,
            "instance-id": instance["InstanceId"],
            "instance-life-cycle": market,
            "instance-type": env.instance_type,
            "local-hostname": hostname,
            "local-ipv4": address,
            "mac": mac,
            "network": {
                "interfaces": {
                    "macs": {
                        mac: {
                            "device-number": "0",
                            "interface-id": instance["NetworkInterfaces"][0]["NetworkInterfaceId"],
                            "local-ipv4s": address,
                            "mac": mac,
                            "subnet-id": self.subnet_id,
                            "subnet-ipv4-cidr-block": str(self.subnet),
                            "vpc-id": instance["VpcId"],
                            "vpc-ipv4-cidr-block": str(env.network.cidr),
                        }
                    }
                }
            },
            "placement": {"availability-zone": env.availability_zone, "region": env.region},
            "iam": instance_credentials(NODE_ROLE, env.account),
        }
        state = {
            "http_tokens": self.launch_template.http_tokens,
            "metadata_tags": self.launch_template.metadata_tags,
            "tags": tags,
            "meta-data": metadata,
            "user_data_file": str(self.directory / "user-data"),
            "identity": {
                "accountId": env.account,
                "architecture": "x86_64",
                "availabilityZone": env.availability_zone,
                "imageId": self.image_id,
                "instanceId": instance["InstanceId"],
                "instanceType": env.instance_type,
                "privateIp": address,
                "region": env.region,
                "version": "2017-09-30",
            },
        }
        return NodeSpec(instance["InstanceId"], address, mac, hostname, state, extra_addresses)

    def node_files(self) -> dict[str, tuple[bytes, int]]:
        """What each node's own layer starts with: the box's CA trusted, the resolver at the subnet's .2, the
        instance store stand-in's mount point."""
        assert self.aws is not None and self.box is not None
        return {
            **self.aws.node_trust_files(),
            "/etc/resolv.conf": (f"nameserver {self.box.endpoint_address}\n".encode(), 0o644),
        }

    def readiness(self, node: Node) -> str:
        assert self.aws is not None
        tags = self.aws.client("ec2").describe_tags(
            Filters=[
                {"Name": "resource-id", "Values": [node.instance_id]},
                {"Name": "key", "Values": [READINESS_TAG_KEY]},
            ]
        )["Tags"]
        return tags[0]["Value"] if tags else ""

    def wait_ready(self, node: Node, seconds: float = 120) -> str:
        """Wait until the node's readiness tag says ready or not ready; the tag's value."""
        deadline = time.monotonic() + seconds
        value = ""
        while time.monotonic() < deadline:
            value = self.readiness(node)
            if value == "ready" or value.startswith("not ready"):
                return value
            if not node.alive():
                break
            time.sleep(0.5)
        journal = node.run("journalctl", "-b", "--no-pager", "-n", "80", "-o", "cat", timeout=30).stdout
        raise AssertionError(f"{node.instance_id} not ready after {seconds:.0f}s (tag: {value!r}); journal:\n{journal}")

    def gpufleet(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """The installed console script, as an operator runs it, against the emulator."""
        assert self.aws is not None
        executable = Path(sys.executable).with_name("gpufleet")
        return subprocess.run(
            [str(executable), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={
                **self.aws.environment(),
                "PATH": os.environ["PATH"],
                "GPUFLEET_ENVIRONMENTS_DIR": str(self.environments_dir),
                # This checkout's gpufleet, whichever checkout the virtualenv's editable install points at.
                "PYTHONPATH": str(REPOSITORY),
            },
            cwd=tempfile.gettempdir(),
        )

    def close(self) -> None:
        try:
            if self.aws is not None:
                self.aws.stop()
        finally:
            if self.box is not None:
                self.box.close()


def versions_manifest(profile: Any) -> dict[str, Any]:
    """/etc/gpufleet/versions.json as scripts/ami/17-validate.sh writes it for PROFILE."""
    components = {name: getattr(component, "version", None) for name, component in profile.components}
    return {
        "profile": profile.name,
        "os": {"family": profile.os.family, "version": profile.os.version},
        "components": components,
        "paths": {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib"},
    }
