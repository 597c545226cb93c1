"""The AMI build's contract, written out by hand so that tests compare the code with these lists rather than with
gpufleet.ami's own constants (a name dropped from a constant would otherwise drop out of the expected value too)."""

from __future__ import annotations

# The components every profile pins, in install order (ami/profiles/*.yaml list them in this order).
COMPONENTS = (
    "driver",
    "fabric_manager",
    "cuda",
    "cudnn",
    "nccl",
    "efa_installer",
    "aws_ofi_nccl",
    "nccl_tests",
    "fsx_lustre",
    "onednn",
    "container_toolkit",
    "aws_cli",
    "cloudwatch_agent",
)

# The provisioning scripts of scripts/ami/, in run order; 03-reboot.sh is the reboot barrier.
SCRIPTS_IN_RUN_ORDER = (
    "00-os-update.sh",
    "01-build-tools.sh",
    "02-nvidia-driver.sh",
    "03-reboot.sh",
    "04-fabric-manager.sh",
    "05-cuda.sh",
    "06-cudnn.sh",
    "07-efa-installer.sh",
    "08-nccl.sh",
    "09-aws-ofi-nccl.sh",
    "10-nccl-tests.sh",
    "11-fsx-lustre.sh",
    "12-onednn.sh",
    "13-container-runtime.sh",
    "14-aws-cli.sh",
    "15-cloudwatch-agent.sh",
    "16-cleanup.sh",
    "17-validate.sh",
)

# What the build instance's SSM agent calls for Packer's Session Manager tunnel (ssh_interface = "session_manager"):
# the five actions of the AWS managed policy AWSCloud9SSMInstanceProfile, an instance profile for Session Manager
# (source: https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSCloud9SSMInstanceProfile.html).
SSM_AGENT_ACTIONS = [
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
]
