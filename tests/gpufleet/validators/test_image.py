"""The image rules (gpufleet/validators/image.py): exactly one image source, and an image the AMI pipeline publishes
where the environment deploys; each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.loading import load_environment, load_pipeline
from tests.gpufleet.ami.pipeline_files import SHIPPED
from tests.gpufleet.environment_files import changed, problems_of, with_change, write

EXACTLY_ONE = (
    "ami: set exactly one of ssm_parameter, id and deep_learning_ami (e.g. ssm_parameter: "
    "/gpufleet/ami/p4d-ubuntu2204, or deep_learning_ami: pytorch-2.11-ubuntu-24.04 for a first job without the AMI "
    "pipeline)"
)
RULES = [
    ("ami", {}, EXACTLY_ONE),
    ("ami.id", "ami-0123456789abcdef0", EXACTLY_ONE),
    ("ami.deep_learning_ami", "pytorch-2.11-ubuntu-24.04", EXACTLY_ONE),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


PIPELINE = load_pipeline(SHIPPED)
# ami/pipeline.yaml ships without an account (the deploying one); a pipeline that pins one, as a user may.
PINNED = PIPELINE.model_copy(update={"account": "123456789012"})


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"ami.ssm_parameter": "/gpufleet/ami/p5-cuda13"},
            "ami.ssm_parameter: /gpufleet/ami/p5-cuda13 is not published in us-east-1: the AMI pipeline builds "
            "p4d-ubuntu1804-cuda11, p4d-al2-cuda11, ubuntu2204-cuda12, ubuntu2404-cuda13, al2023-cuda13 (add p5-cuda13 "
            "to profiles in ami/pipeline.yaml)",
        ),
        (
            {"account": "210987654321"},
            "ami.ssm_parameter: /gpufleet/ami/p4d-ubuntu1804-cuda11 is published in account 123456789012 "
            "(ami/pipeline.yaml pins it), not in 210987654321 (deploy in 123456789012, remove account from "
            "ami/pipeline.yaml to build the images in the account that deploys the pipeline, or set ami.id to an image "
            "shared with 210987654321)",
        ),
    ],
)
def test_an_environment_needs_its_image_published_where_it_deploys(tmp_path, changes, expected):
    path = write(tmp_path, changed(changes))
    with pytest.raises(GpufleetError) as raised:
        load_environment(path, ami_pipeline=PINNED)
    assert raised.value.problems == (f"{path}: {expected}",)
    # Without the pipeline (parsing alone, unit tests of other rules) the rule has nothing to compare with.
    assert load_environment(path).ami.ssm_parameter == changed(changes)["ami"]["ssm_parameter"]


def test_without_an_account_in_the_pipeline_any_account_may_read_its_images(tmp_path):
    """The pipeline deployed from an environment's account publishes there: no account to compare with."""
    path = write(tmp_path, changed({"account": "210987654321"}))
    assert load_environment(path, ami_pipeline=PIPELINE).account == "210987654321"


@pytest.mark.parametrize(
    "changes",
    [
        {"region": "eu-central-1", "availability_zone": "eu-central-1a"},
        {"ami.ssm_parameter": "/team/images/ubuntu", "account": "210987654321"},
        {"ami.ssm_parameter": None, "ami.id": "ami-0123456789abcdef0", "account": "210987654321"},
    ],
)
def test_any_region_of_the_pipelines_account_and_images_of_other_origins_pass(tmp_path, changes):
    """A region is published because the environment reads the profile there (publish_regions)."""
    assert load_environment(write(tmp_path, changed(changes)), ami_pipeline=PIPELINE).name == "lab"


# A Deep Learning AMI instead of the pipeline's image (gpufleet/deep_learning_ami.py).
DLAMI = {"ami.ssm_parameter": None, "ami.deep_learning_ami": "pytorch-2.11-ubuntu-24.04"}


@pytest.mark.parametrize("name", ["pytorch-2.11-ubuntu-24.04", "pytorch-2.9-ubuntu-24.04"])
@pytest.mark.parametrize("instance_type", ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "g5.48xlarge", "g5.8xlarge"])
def test_every_variant_boots_every_catalog_type(tmp_path, name, instance_type):
    """Both variants' release notes list G5, P4 (p4d), P4de and P5: every type of gpufleet's catalog."""
    changes = {**DLAMI, "ami.deep_learning_ami": name, "instance_type": instance_type}
    env = load_environment(write(tmp_path, changed(changes)), ami_pipeline=PIPELINE)
    assert env.image_parameter == f"/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-{name}/latest/ami-id"
    assert env.ami.deep_learning.python_venv == "/opt/pytorch"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"ami.deep_learning_ami": "pytorch-2.x-ubuntu-22.04"},
            [
                "ami.deep_learning_ami: 'pytorch-2.x-ubuntu-22.04' is not a Deep Learning AMI gpufleet knows (choose "
                "one of pytorch-2.11-ubuntu-24.04, pytorch-2.9-ubuntu-24.04, or give another image by ssm_parameter "
                "or id)"
            ],
        ),
        (
            {"ami.deep_learning_ami": "oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04"},
            [
                "ami.deep_learning_ami: 'oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04' is not a Deep Learning AMI "
                "gpufleet knows (choose one of pytorch-2.11-ubuntu-24.04, pytorch-2.9-ubuntu-24.04, or give another "
                "image by ssm_parameter or id)"
            ],
        ),
        (
            {"ami.deep_learning_ami": 2.11},
            ["ami.deep_learning_ami: input should be a valid string, got 2.11 (put it in quotes)"],
        ),
        (
            {"ami.root_device_name": "/dev/xvda"},
            [
                "ami.root_device_name: pytorch-2.11-ubuntu-24.04's root device is /dev/sda1, not /dev/xvda (leave "
                "root_device_name out)"
            ],
        ),
        (
            {"ami.ssm_parameter": "/gpufleet/ami/ubuntu2204-cuda12"},
            [EXACTLY_ONE],
        ),
    ],
)
def test_a_deep_learning_ami_refused_one_line_each(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed({**DLAMI, **changes})) == expected


def test_a_deep_learning_ami_on_an_instance_type_it_does_not_support(tmp_path, monkeypatch):
    """No catalog type is outside both variants' families: a variant that lists fewer stands in for one that does
    not support the environment's type (a trn1 node, or a family AWS drops from a release)."""
    import gpufleet.deep_learning_ami as catalog

    narrow = dataclasses.replace(catalog.DEEP_LEARNING_AMIS["pytorch-2.11-ubuntu-24.04"], families=("g5", "p5"))
    monkeypatch.setitem(catalog.DEEP_LEARNING_AMIS, "pytorch-2.11-ubuntu-24.04", narrow)

    assert problems_of(tmp_path, changed(DLAMI)) == [
        "ami.deep_learning_ami: pytorch-2.11-ubuntu-24.04 does not support p4d.24xlarge (its release notes list the "
        "families g5, p5: choose an instance type of one of them, or another image)"
    ]
    assert load_environment(write(tmp_path, changed({**DLAMI, "instance_type": "p5.48xlarge"}))).name == "lab"


def test_the_root_device_may_be_named_when_it_is_the_variants(tmp_path):
    env = load_environment(write(tmp_path, changed({**DLAMI, "ami.root_device_name": "/dev/sda1"})))
    assert env.ami.root_device_name == "/dev/sda1"


def test_a_deep_learning_ami_is_not_a_published_profile(tmp_path):
    """The pipeline's rules judge /gpufleet/ami/PROFILE only: any account and region may take a DLAMI."""
    changes = {**DLAMI, "account": "210987654321", "region": "eu-central-1", "availability_zone": "eu-central-1a"}
    assert load_environment(write(tmp_path, changed(changes)), ami_pipeline=PIPELINE).name == "lab"
