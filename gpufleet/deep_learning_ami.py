"""The AWS Deep Learning AMIs (DLAMI) an environment may boot without gpufleet's AMI pipeline (ami.deep_learning_ami).

A first job on a fresh account needs no image build: AWS publishes the id of the newest release of each DLAMI in a
public SSM parameter, /aws/service/deeplearning/ami/$architecture/$ami_type/latest/ami-id, where ami_type is the
DLAMI's name without the words "deep", "learning" and "ami" (DLAMI developer guide, "Finding the ID of a DLAMI",
https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html). The cluster stack takes it as it takes
/gpufleet/ami/PROFILE: a CloudFormation parameter of type AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>, resolved
at deploy time, so synthesis stays offline (stacks/constructs/node_launch_template.py).

Each variant here is one AWS documents in its release notes (DLAMI developer guide, "Release notes for DLAMIs",
https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html; the pages were read through their
mirror at docs.amazonaws.cn/dlami/latest/devguide/, in its machine translation), with the instance families its notes
list under supported_ec2_instances and its python_location. The PyTorch variants ship PyTorch in a virtual environment,
/opt/pytorch (python_location /opt/pytorch/bin/python), so `gpufleet run --torchrun -- python train.py` has PyTorch on
the first job: the node writes /etc/gpufleet/python.env naming it (scripts/node/deep-learning-ami.sh), the contract the
AMI profiles' venv follows too.

What the node scripts rely on, and where it comes from:
- The EFA installer's layout: libfabric under /opt/amazon/efa, Open MPI under /opt/amazon/openmpi (EC2 user guide,
  efa-start-nccl; the release notes give efa_version 1.47.0 for both variants' latest notes). EFA installers from 1.39
  put aws-ofi-nccl under /opt/amazon/ofi-nccl (the project's reference facts, gpu-cluster-facts.md; the notes give
  ofi_nccl_version, not its path): scripts/node/efa-env.sh looks there first, then in /opt/aws-ofi-nccl, where older
  images built it (unconfirmed for a DLAMI), and reads the plugin's version from the library itself.
- Ubuntu's root device, /dev/sda1 (unconfirmed for the DLAMI itself: every Ubuntu AMI on EC2 uses it).
- No gpufleet versions manifest (/etc/gpufleet/versions.json): the health check reports the versions the node shows.
- Fabric Manager: the health check requires nvidia-fabricmanager active on NVSwitch types, as on gpufleet's images;
  that the DLAMI starts it at boot on p4d/p5 is (unconfirmed: the release notes list no fabric manager version).

The Packer-built images (ami/profiles) stay the production path: their versions are pinned, checked against each other
and recorded on the image; a DLAMI's "latest" moves whenever AWS publishes a release (docs/guides/images.md).
"""

from __future__ import annotations

from dataclasses import dataclass

# The public parameter's path (find-dlami-id.html): x86_64 is the only architecture gpufleet's catalog has.
PARAMETER_TEMPLATE = "/aws/service/deeplearning/ami/x86_64/{ami_type}/latest/ami-id"
RELEASE_NOTES = "https://docs.aws.amazon.com/dlami/latest/devguide/{page}.html"
# The families of the PyTorch OSS Nvidia Driver DLAMIs on Ubuntu 24.04, x86_64, as both variants' latest release notes
# list them ("G4dn, G5, G6, Gr6, G6e, P4, P4de, P5, P5e, P5en, P6-B200"); their "P4" is the p4d family, the only P4
# family besides p4de (EC2 instance types: p4d.24xlarge, p4de.24xlarge).
PYTORCH_UBUNTU_2404_FAMILIES = ("g4dn", "g5", "g6", "gr6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")


@dataclass(frozen=True)
class DeepLearningAmi:
    """One DLAMI variant: the name an environment gives it, its parameter's ami_type, the instance families its
    release notes support, the virtual environment with its framework (None: the system Python only), the root device,
    and the release notes its facts come from."""

    name: str
    ami_type: str
    families: tuple[str, ...]
    python_venv: str | None
    root_device_name: str
    release_notes_page: str

    @property
    def parameter(self) -> str:
        """The public SSM parameter that holds the id of the newest release of this DLAMI in every region."""
        return PARAMETER_TEMPLATE.format(ami_type=self.ami_type)

    @property
    def release_notes(self) -> str:
        return RELEASE_NOTES.format(page=self.release_notes_page)

    def supports(self, instance_type: str) -> bool:
        return instance_family(instance_type) in self.families


def instance_family(instance_type: str) -> str:
    """An instance type's family as the DLAMI release notes name them, lower-cased: p5.48xlarge -> p5,
    p6-b200.48xlarge -> p6-b200 (everything before the size)."""
    return instance_type.split(".", 1)[0]


DEEP_LEARNING_AMIS: dict[str, DeepLearningAmi] = {
    ami.name: ami
    for ami in (
        # "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04)", release 20260815: python_location
        # /opt/pytorch/bin/python, nvidia_driver 595.91.07, efa_version 1.47.0, ofi_nccl_version 1.18.0.
        DeepLearningAmi(
            name="pytorch-2.11-ubuntu-24.04",
            ami_type="oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04",
            families=PYTORCH_UBUNTU_2404_FAMILIES,
            python_venv="/opt/pytorch",
            root_device_name="/dev/sda1",
            release_notes_page="aws-deep-learning-ami-gpupt211oss-ul2404-2026-08-17",
        ),
        # "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.9 (Ubuntu 24.04)", release 20260317: python_location
        # /opt/pytorch/bin/python, nvidia_driver 580.126.09, efa_version 1.44.0, ofi_nccl_version 1.17.1.
        DeepLearningAmi(
            name="pytorch-2.9-ubuntu-24.04",
            ami_type="oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04",
            families=PYTORCH_UBUNTU_2404_FAMILIES,
            python_venv="/opt/pytorch",
            root_device_name="/dev/sda1",
            release_notes_page="aws-deep-learning-ami-gpupt29oss-ul2404-2026-03-20",
        ),
    )
}
DEEP_LEARNING_AMI_NAMES = tuple(DEEP_LEARNING_AMIS)


def deep_learning_ami_problem(name: str) -> str | None:
    """The one line a name outside the catalog gets: the names gpufleet knows, and where the others are listed."""
    if name in DEEP_LEARNING_AMIS:
        return None
    return (
        f"'{name}' is not a Deep Learning AMI gpufleet knows (choose one of {', '.join(DEEP_LEARNING_AMI_NAMES)}, "
        "or give another image by ssm_parameter or id)"
    )
