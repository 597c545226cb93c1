"""The environment matrix: test-only environments that together use every value of every environment option and
every instance type of the catalog at least once (tests/stacks/test_matrix.py proves it from the model and the
catalog), loaded through the real loader, so `gpufleet validate`'s rules hold for each.

The construct tests (tests/stacks/constructs/) synthesize each construct for every entry in a bare cdk.Stack, so the
configurations no shipped environment uses (efa off, one-shot requests, g5, capacity sources, node options off) reach
the constructs too. What each entry stands for:

- spot-p4d: a Spot Fleet that maintains 4 p4d nodes (1 on-demand) in a new VPC with a NAT gateway; every Spot Fleet
  option away from its default (diversified, prioritized, launch-before-terminate with a delay, unhealthy nodes
  kept, replace-all), the capacity fallback, an image from SSM, a key pair, tags and every node option on (MIG for
  independent jobs on an EFA cluster), and a PERSISTENT_2 file system (customer managed key) mounted at /shared,
  linked to a bucket its stack creates, kept when destroyed;
- request-p4de: a one-shot Spot Fleet request of 2 on-demand p4de nodes in an existing VPC, without EFA, ending at
  valid_until, launching only into a resource group of reservations; a fixed Amazon Linux image (/dev/xvda), the
  node options off, MIG for single-node inference, an existing file system;
- block-p5: an Auto Scaling group of 2 p5 nodes in a Capacity Block (a week in 2099: ahead of any clock the tests
  run under), in the smallest VPC allowed, rollout manual, a fixed image whose root device is /dev/nvme0n1;
- asg-g5: an Auto Scaling group of 4 g5.48xlarge nodes (2 on-demand) going to two reservations first, with capacity
  rebalancing, the capacity fallback and replace-all; a PERSISTENT_1 file system without compression, linked to a
  prefix of an existing bucket for some events only, deleted with its stack;
- small-g5: a Spot Fleet that maintains 1 on-demand g5.8xlarge node (one network card) in one reservation, rollout
  manual; a SCRATCH_2 file system with no S3 link;
- eks-p5 (flavour eks): an EKS cluster in a new VPC (control-plane subnets in two AZs) with one on-demand and one
  spot p5 node (32 EFA cards), every add-on written out and on, three larger system nodes, the NVMe drives in RAID0
  and a new SCRATCH_2 file system mounted for pods by the FSx CSI driver; its API public to two networks (an office
  and a VPN egress address) besides private, its control-plane logs kept 90 days;
- eks-g5 (flavour eks): an EKS cluster in an existing VPC (its named control-plane subnets) with 2 on-demand
  g5.48xlarge nodes without EFA (g5 has no GPUDirect RDMA) in one reservation, every add-on off, an existing file
  system (not mounted: the CSI driver is off).

The construct tests of the fleet flavour's node group take FLEET_ENTRIES; the eks entries go through their own stack
(tests/stacks/test_eks_cluster_stack.py, tests/stacks/test_matrix_stacks.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.environment import Environment
from gpufleet.loading import check_environments, load_pipeline
from tests.gpufleet.validators.test_network import NO_NAT

ACCOUNT = "123456789012"
RESERVATION_ID = "cr-0123456789abcdef0"
OTHER_RESERVATION_ID = "cr-0fedcba9876543210"
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/gpu-reservations"
KMS_KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ADMIN_ROLE_ARN = "arn:aws:iam::123456789012:role/Admin"

MATRIX: dict[str, dict] = {
    "spot-p4d": {
        "name": "spot-p4d",
        "account": ACCOUNT,
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "network": {"cidr": "10.50.0.0/16", "nat_gateway": True, "flow_log_retention_days": 30},
        "instance_type": "p4d.24xlarge",
        "efa": True,
        "capacity": {"target": 4, "on_demand": 1},
        "fleet": {
            "backend": "spot-fleet",
            "type": "maintain",
            "allocation_strategy": "diversified",
            "on_demand_allocation_strategy": "prioritized",
            "capacity_rebalance": {"replacement_strategy": "launch-before-terminate", "termination_delay_seconds": 300},
            "replace_unhealthy_instances": False,
            "rollout": "replace-all",
            "fallback": {"after_minutes": 20, "restore_after_minutes": 40, "max_extra_on_demand": 3},
        },
        "ami": {"ssm_parameter": "/gpufleet/ami/p4d-ubuntu1804-cuda11", "root_device_name": "/dev/sda1"},
        "root_volume_gib": 300,
        "key_pair": "ops-key",
        "monitoring": {"log_retention_days": 90},
        "tags": {"team": "research"},
        "node": {
            "raid0_nvme": True,
            "scratch_mount": "/data",
            "max_clocks": True,
            "mig_profile": "3g.20gb",
            "mig_purpose": "independent-jobs",
            "checkpoint_hook": "/usr/local/bin/save-checkpoint --wait 60",
        },
        "storage": {
            "mount_path": "/shared",
            "on_destroy": "retain",
            "lustre": {
                "deployment_type": "PERSISTENT_2",
                "storage_capacity_gib": 1200,
                "throughput_mb_per_tib": 125,
                "compression": "LZ4",
                "kms_key_arn": KMS_KEY_ARN,
            },
            "data_repository": {},
        },
    },
    "request-p4de": {
        "name": "request-p4de",
        "account": ACCOUNT,
        "region": "us-west-2",
        "availability_zone": "us-west-2b",
        "network": {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
        "instance_type": "p4de.24xlarge",
        "efa": False,
        "capacity": {
            "target": 2,
            "on_demand": 2,
            "reservation": {"resource_group_arn": GROUP_ARN, "preference": "only"},
        },
        "fleet": {"type": "request", "allocation_strategy": "lowestPrice", "valid_until": "2099-01-01T00:00:00Z"},
        "ami": {"id": "ami-0123456789abcdef0", "root_device_name": "/dev/xvda"},
        "node": {
            "raid0_nvme": False,
            "max_clocks": False,
            "mig_profile": "7g.80gb",
            "mig_purpose": "single-node-inference",
        },
        "storage": {
            "existing": {
                "file_system_id": "fs-0123456789abcdef0",
                "dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                "mount_name": "abcdefgh",
                "security_group_id": "sg-0a1b2c3d",
            }
        },
    },
    "block-p5": {
        "name": "block-p5",
        "account": ACCOUNT,
        "region": "us-east-2",
        "availability_zone": "us-east-2c",
        "network": {"cidr": "10.60.0.0/24"},
        "instance_type": "p5.48xlarge",
        "capacity": {
            "target": 2,
            "on_demand": 2,
            "capacity_block": {
                "reservation_id": RESERVATION_ID,
                "start": "2099-01-05T11:30:00Z",
                "end": "2099-01-12T11:30:00Z",
            },
        },
        "fleet": {
            "backend": "auto-scaling",
            "allocation_strategy": "capacityOptimizedPrioritized",
            "rollout": "manual",
        },
        "ami": {"id": "ami-0fedcba9876543210", "root_device_name": "/dev/nvme0n1"},
    },
    "asg-g5": {
        "name": "asg-g5",
        "account": ACCOUNT,
        "region": "us-east-1",
        "availability_zone": "us-east-1b",
        "network": {"cidr": "10.70.0.0/20"},
        "instance_type": "g5.48xlarge",
        "capacity": {
            "target": 4,
            "on_demand": 2,
            "reservation": {"ids": [RESERVATION_ID, OTHER_RESERVATION_ID], "preference": "first"},
        },
        "fleet": {
            "backend": "auto-scaling",
            "allocation_strategy": "capacityOptimized",
            "capacity_rebalance": {"replacement_strategy": "launch"},
            "rollout": "replace-all",
            "fallback": {"max_extra_on_demand": 2},
        },
        "ami": {"ssm_parameter": "/gpufleet/ami/ubuntu2204-cuda12"},
        "tags": {"team": "inference", "cost-center": "gpu"},
        "node": {"checkpoint_hook": "/usr/local/bin/save-checkpoint"},
        "storage": {
            "on_destroy": "delete",
            "lustre": {
                "deployment_type": "PERSISTENT_1",
                "storage_capacity_gib": 2400,
                "throughput_mb_per_tib": 50,
                "compression": "NONE",
            },
            "data_repository": {
                "bucket": "inference-datasets",
                "prefix": "clusters/asg-g5",
                "import_events": ["NEW", "CHANGED"],
                "export_events": ["NEW"],
            },
        },
    },
    "small-g5": {
        "name": "small-g5",
        "account": ACCOUNT,
        "region": "us-east-1",
        "availability_zone": "us-east-1c",
        "network": {"cidr": "10.80.0.0/16"},
        "instance_type": "g5.8xlarge",
        "capacity": {"target": 1, "on_demand": 1, "reservation": {"ids": [RESERVATION_ID]}},
        "fleet": {"allocation_strategy": "priceCapacityOptimized", "rollout": "manual"},
        # The older of the Deep Learning AMIs gpufleet knows (elastic.yaml has the newer).
        "ami": {"deep_learning_ami": "pytorch-2.9-ubuntu-24.04"},
        "storage": {"lustre": {"deployment_type": "SCRATCH_2"}},
    },
    "eks-p5": {
        "name": "eks-p5",
        "flavour": "eks",
        "account": ACCOUNT,
        "region": "us-west-2",
        "availability_zone": "us-west-2d",
        "network": {"cidr": "10.90.0.0/16", "nat_gateway": True},
        "instance_type": "p5.48xlarge",
        "capacity": {"target": 2, "on_demand": 1},
        "node": {"raid0_nvme": True},
        "storage": {"mount_path": "/checkpoints", "lustre": {"deployment_type": "SCRATCH_2"}},
        "eks": {
            "kubernetes_version": "1.35",
            "admin_principal_arns": [ADMIN_ROLE_ARN, "arn:aws:iam::123456789012:user/operator"],
            "control_plane_availability_zones": ["us-west-2a", "us-west-2b"],
            "endpoint_public_cidrs": ["1.2.3.0/24", "1.2.4.8/32"],
            "control_plane_log_retention_days": 90,
            "system_nodes": {"instance_type": "m6i.xlarge", "count": 3},
            "add_ons": {
                "efa_device_plugin": True,
                "nvidia_device_plugin": True,
                "mpi_operator": True,
                "fsx_csi_driver": True,
            },
        },
    },
    "eks-g5": {
        "name": "eks-g5",
        "flavour": "eks",
        "account": ACCOUNT,
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "network": {"vpc_id": "vpc-0a1b2c3d", "subnet_id": "subnet-0a1b2c3d"},
        "instance_type": "g5.48xlarge",
        "efa": False,
        "capacity": {"target": 2, "on_demand": 2, "reservation": {"ids": [RESERVATION_ID]}},
        "storage": {
            "existing": {
                "file_system_id": "fs-0123456789abcdef0",
                "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
                "mount_name": "abcdefgh",
                "security_group_id": "sg-0a1b2c3d",
            }
        },
        "eks": {
            "kubernetes_version": "1.35",
            "admin_principal_arns": [ADMIN_ROLE_ARN],
            "control_plane_subnet_ids": ["subnet-0a1b2c3e", "subnet-0a1b2c3f"],
            "add_ons": {
                "efa_device_plugin": False,
                "nvidia_device_plugin": False,
                "mpi_operator": False,
                "fsx_csi_driver": False,
            },
        },
    },
}
# The entries of the fleet flavour, which the node group's construct tests take (tests/stacks/constructs/).
FLEET_ENTRIES = [name for name, document in MATRIX.items() if document.get("flavour", "fleet") == "fleet"]


def write_matrix(directory: Path) -> Path:
    """Every entry written to DIRECTORY as NAME.yaml, as environments/ holds them."""
    for name, document in MATRIX.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def load_matrix(directory: Path) -> dict[str, Environment]:
    """The entries written by write_matrix, checked as `gpufleet validate` checks them (against the AMI pipeline of
    ami/pipeline.yaml); a warning fails too, since the matrix must stay valid on its own, but for the one the entries
    with a new VPC and no NAT gateway exist to give (the nodes' endpoints-only network)."""
    environments, warnings = check_environments(
        [directory / f"{name}.yaml" for name in MATRIX], ami_pipeline=load_pipeline()
    )
    without_nat = [
        name
        for name, document in MATRIX.items()
        if "cidr" in document["network"]
        and not document["network"].get("nat_gateway")
        and document.get("flavour") != "eks"
    ]
    assert warnings == [f"{directory / name}.yaml: {NO_NAT}" for name in without_nat], warnings
    return {environment.name: environment for environment in environments}
