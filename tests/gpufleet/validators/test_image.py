"""The image rules (gpufleet/validators/image.py): exactly one image source, and an image the AMI pipeline publishes
where the environment deploys; each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.loading import load_environment, load_pipeline
from tests.gpufleet.ami.pipeline_files import SHIPPED
from tests.gpufleet.environment_files import changed, problems_of, with_change, write

RULES = [
    ("ami", {}, "ami: set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)"),
    (
        "ami.id",
        "ami-0123456789abcdef0",
        "ami: set exactly one of ssm_parameter and id (e.g. ssm_parameter: /gpufleet/ami/p4d-ubuntu2204)",
    ),
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
