"""The node rules (gpufleet/validators/node.py): an instance type of the catalog, EFA, MIG and the user data within
EC2's limit; each with the exact line `gpufleet validate` prints."""

from __future__ import annotations

import random

import pytest

from gpufleet.loading import load_environment
from tests.gpufleet.environment_files import changed, problems_of, with_change, write

RULES = [
    (
        "instance_type",
        "p3.16xlarge",
        "instance_type: 'p3.16xlarge' is not in the instance catalog (allowed: "
        "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, g5.48xlarge, g5.8xlarge; add it to gpufleet/instance_types.yaml)",
    ),
    (
        "node.mig_profile",
        "1g.10gb",
        "node.mig_profile: '1g.10gb' is not a MIG profile of the A100 40 GB "
        "(allowed: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)",
    ),
]


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"instance_type": "g5.48xlarge", "node.mig_profile": "1g.5gb"},
            "node.mig_profile: A10G GPUs of g5.48xlarge do not support MIG (remove mig_profile)",
        ),
    ],
)
def test_rules_that_combine_fields(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


# NCCL is not supported with MIG (MIG user guide, Deployment Considerations): MIG on an EFA cluster is a choice.
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"node.mig_profile": "3g.20gb"},
            "node.mig_profile: MIG on an EFA cluster: NCCL, what EFA clusters are for, is not supported with MIG "
            "(remove mig_profile, set efa: false, or state that each MIG instance works alone: "
            "node.mig_purpose: single-node-inference or independent-jobs)",
        ),
        (
            {"node.mig_profile": "3g.20gb", "node.mig_purpose": "training"},
            "node.mig_purpose: 'training' is not a MIG purpose (allowed: single-node-inference, independent-jobs)",
        ),
        (
            {"node.mig_purpose": "single-node-inference"},
            "node.mig_purpose: only applies with node.mig_profile (remove it, or set mig_profile)",
        ),
    ],
    ids=["efa-without-purpose", "unknown-purpose", "purpose-without-profile"],
)
def test_mig_on_an_efa_cluster_needs_a_stated_purpose(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        {"node.mig_profile": "3g.20gb", "node.mig_purpose": "single-node-inference"},
        {"node.mig_profile": "1g.5gb", "node.mig_purpose": "independent-jobs"},
        {"node.mig_profile": "3g.20gb", "efa": False},
    ],
    ids=["inference", "independent-jobs", "no-efa"],
)
def test_mig_with_a_purpose_or_without_efa_is_valid(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).node.mig_profile == changes["node.mig_profile"]


def test_efa_requested_on_a_type_without_efa(tmp_path, monkeypatch):
    from gpufleet import catalog

    without_efa = catalog.load_catalog()["g5.8xlarge"].model_copy(update={"max_efa_interfaces": 0})
    monkeypatch.setattr(catalog, "load_catalog", lambda: {"g5.8xlarge": without_efa})
    monkeypatch.setattr("gpufleet.validators.node.load_catalog", lambda: {"g5.8xlarge": without_efa})
    assert problems_of(tmp_path, with_change("instance_type", "g5.8xlarge")) == [
        "efa: EFA requested but g5.8xlarge has no EFA (set efa: false or choose an EFA instance type)"
    ]


def _random_text(length: int) -> str:
    """Text gzip cannot shrink much: the checkpoint hook is the one node setting of free length."""
    return "".join(random.Random(7).choices("abcdefghijklmnop0123456789", k=length))


# An image of the user's own, which may carry any hook: the hook below is long, not missing.
OWN_IMAGE = {"ami.ssm_parameter": None, "ami.id": "ami-0123456789abcdef0"}


def test_user_data_over_ec2s_limit_is_a_validation_problem(tmp_path):
    document = changed({**OWN_IMAGE, "node.checkpoint_hook": "/usr/local/bin/save " + _random_text(20000)})
    (line,) = problems_of(tmp_path, document)
    assert line.startswith("node: the user data is ")
    assert line.endswith(
        " bytes compressed, over EC2's limit of 16384; turn off a node feature or shorten node.checkpoint_hook"
    )


def test_user_data_under_ec2s_limit_passes(tmp_path):
    document = changed({**OWN_IMAGE, "node.checkpoint_hook": "/usr/local/bin/save " + _random_text(2000)})
    assert load_environment(write(tmp_path, document)).node.checkpoint_hook.startswith("/usr/local/bin/save ")


def test_a_hook_that_would_end_the_user_data_heredoc_is_a_validation_problem(tmp_path):
    document = changed({**OWN_IMAGE, "node.checkpoint_hook": "/opt/save\nGPUFLEET_END_OF_FILE\nrm -rf /"})
    assert problems_of(tmp_path, document) == [
        "node: /etc/gpufleet/node.env: a line of its content is 'GPUFLEET_END_OF_FILE', which would end the heredoc "
        "early"
    ]


# The AMI pipeline's images (VALID reads /gpufleet/ami/p4d-ubuntu1804-cuda11) carry no hook; the user data installs
# /usr/local/bin/save-checkpoint, whose only option is --wait SECONDS (scripts/ops/save-checkpoint.sh).
@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"node.checkpoint_hook": "/opt/train/checkpoint.sh --bucket s3://ckpt"},
            "node.checkpoint_hook: /opt/train/checkpoint.sh is not on the nodes: the AMI pipeline's images carry no "
            "checkpoint hook and the user data installs only /usr/local/bin/save-checkpoint (use it, or set ami.id to "
            "an image of your own that has /opt/train/checkpoint.sh)",
        ),
        (
            {"node.checkpoint_hook": "/usr/local/bin/save-checkpoint --urgent"},
            "node.checkpoint_hook: /usr/local/bin/save-checkpoint takes only --wait SECONDS, got '--urgent'",
        ),
        (
            {"node.checkpoint_hook": "/usr/local/bin/save-checkpoint --wait 1.5"},
            "node.checkpoint_hook: /usr/local/bin/save-checkpoint takes only --wait SECONDS, got '--wait 1.5'",
        ),
        (
            {"node.checkpoint_hook": "/usr/local/bin/save-checkpoint --wait"},
            "node.checkpoint_hook: /usr/local/bin/save-checkpoint takes only --wait SECONDS, got '--wait'",
        ),
        (
            {"node.checkpoint_hook": "'/usr/local/bin/save-checkpoint"},
            "node.checkpoint_hook: cannot be read as a shell command (No closing quotation): close its quotes",
        ),
        (
            {"node.checkpoint_hook": " "},
            "node.checkpoint_hook: names no program (remove it, or set it to /usr/local/bin/save-checkpoint)",
        ),
        (
            {**OWN_IMAGE, "node.checkpoint_hook": "python3 /opt/train/checkpoint.py"},
            "node.checkpoint_hook: 'python3' is not an absolute path: name the program by the path your image "
            "installs it at, or use /usr/local/bin/save-checkpoint",
        ),
        (
            {
                "ami.ssm_parameter": None,
                "ami.deep_learning_ami": "pytorch-2.11-ubuntu-24.04",
                "node.checkpoint_hook": "/opt/train/checkpoint.sh",
            },
            "node.checkpoint_hook: /opt/train/checkpoint.sh is not on the nodes: a Deep Learning AMI carries no "
            "checkpoint hook and the user data installs only /usr/local/bin/save-checkpoint (use it, or set ami.id to "
            "an image of your own that has /opt/train/checkpoint.sh)",
        ),
        (
            {"ami.ssm_parameter": "/aws/service/deeplearning/ami/x86_64/base-oss", "node.checkpoint_hook": "save"},
            "node.checkpoint_hook: 'save' is not an absolute path: name the program by the path your image "
            "installs it at, or use /usr/local/bin/save-checkpoint",
        ),
    ],
)
def test_a_checkpoint_hook_the_nodes_do_not_have_is_one_exact_line(tmp_path, changes, expected):
    assert problems_of(tmp_path, changed(changes)) == [expected]


@pytest.mark.parametrize(
    "changes",
    [
        {"node.checkpoint_hook": "/usr/local/bin/save-checkpoint"},
        {"node.checkpoint_hook": "/usr/local/bin/save-checkpoint --wait 100"},
        {"node.checkpoint_hook": "'/usr/local/bin/save-checkpoint' --wait 0"},
        {
            "ami.ssm_parameter": None,
            "ami.deep_learning_ami": "pytorch-2.9-ubuntu-24.04",
            "node.checkpoint_hook": "/usr/local/bin/save-checkpoint --wait 60",
        },
        {**OWN_IMAGE, "node.checkpoint_hook": "/opt/train/checkpoint.sh --bucket s3://ckpt"},
        {"ami.ssm_parameter": "/aws/service/deeplearning/ami/x86_64/base-oss", "node.checkpoint_hook": "/opt/ckpt"},
        {"node.checkpoint_hook": None},
    ],
)
def test_a_checkpoint_hook_the_user_data_or_the_image_provides_passes(tmp_path, changes):
    assert load_environment(write(tmp_path, changed(changes))).node.checkpoint_hook == changes["node.checkpoint_hook"]
