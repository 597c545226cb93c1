"""The AMI generator: pinned software profiles, their compatibility gate and the Packer templates built from them.

The names shared with the provisioning scripts and the AMI pipeline (component keys, script file names) are
fixed by the project's contracts and live here, once.
"""

from __future__ import annotations

from gpufleet import shipped_path

AMI_DIR = shipped_path("ami")
PROFILES_DIR = AMI_DIR / "profiles"
PACKER_DIR = AMI_DIR / "packer"
COMPATIBILITY_FILE = AMI_DIR / "compatibility.yaml"
SCRIPTS_DIR = shipped_path("scripts", "ami")
# Where a profile's pytorch option puts its virtualenv (root's, world-readable); the versions manifest records it as
# paths.python_venv, and a node's python-env step hands it to `gpufleet run` (/etc/gpufleet/python.env).
PYTORCH_VENV = "/opt/gpufleet/pytorch"
# Where a build publishes the id of the image of PROFILE; cluster environments read it (ami.ssm_parameter).
AMI_PARAMETER_PREFIX = "/gpufleet/ami/"

COMPONENT_KEYS: tuple[str, ...] = (
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

# Run in this order by the rendered Packer build; a name ending in -reboot.sh is the reboot barrier.
SCRIPT_NAMES: tuple[str, ...] = (
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

# What the build instance's SSM agent needs for Packer's Session Manager tunnel: the templates' temporary instance
# profile grants these, and the AMI pipeline's build instance role grants exactly these.
SSM_AGENT_ACTIONS: tuple[str, ...] = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)


def published_profile(parameter: str | None) -> str | None:
    """The profile whose image the SSM parameter holds, when it is one the pipeline writes (/gpufleet/ami/PROFILE)."""
    if parameter is None or not parameter.startswith(AMI_PARAMETER_PREFIX):
        return None
    return parameter.removeprefix(AMI_PARAMETER_PREFIX)
