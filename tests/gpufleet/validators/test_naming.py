"""The naming rules (gpufleet/validators/naming.py): an environment is named after its file, and accept and accept-...
are the AMI pipeline acceptance gate's: a user's environment may not take them, the gate's own environment (the file
`gpufleet ami acceptance-environment` writes) still passes."""

from __future__ import annotations

import subprocess

import pytest

from gpufleet.ami.pipeline import acceptance_environment
from gpufleet.cli import main
from gpufleet.constants import ACCEPTANCE_NAME_PREFIX
from gpufleet.errors import GpufleetError
from gpufleet.loading import (
    ENVIRONMENTS_DIR_VARIABLE,
    PIPELINE_FILE_VARIABLE,
    check_environment,
    load_environment,
    load_named_environment,
    load_pipeline,
)
from gpufleet.validators.naming import GATE_ENVIRONMENT_NAME
from tests.conftest import REPOSITORY
from tests.gate_pipeline import gate_pipeline
from tests.gpufleet.environment_files import VALID, changed, problems_of, with_change, write

RULES = [
    ("name", "other", "name: 'other' differs from the file name (name it 'lab' or rename the file to other.yaml)"),
]
IMAGE = "ami-0123456789abcdef0"
GATE_NAME = "accept-5f0c1d2e"
RESERVED = (
    "is reserved for the AMI pipeline's acceptance gate, whose grants reach every stack named gpufleet-accept-* and "
    "every node tagged accept-* (choose a name that is neither accept nor accept-...)"
)
GATE_FORM = f"name: '{GATE_NAME}' is the name of an AMI acceptance gate environment (accept- and 8 hex digits)"


@pytest.mark.parametrize(("field", "value", "expected"), RULES, ids=[f"{rule[0]}={rule[1]!r}" for rule in RULES])
def test_rule_reports_exact_message(tmp_path, field, value, expected):
    assert problems_of(tmp_path, with_change(field, value)) == [expected]


@pytest.mark.parametrize("name", ["accept", "accept-dev", "accept-5f0c1d2", "accept-5f0c1d2e9", "accept-5f0c1d2g"])
def test_a_name_the_gates_grants_reach_is_refused_even_unchecked_against_the_pipeline(tmp_path, name):
    # accept: its stacks, gpufleet-accept-cluster and the rest, match the gate's gpufleet-accept-*.
    assert problems_of(tmp_path, with_change("name", name), name) == [f"name: '{name}' {RESERVED}"]


@pytest.mark.parametrize("name", ["accepted", "acceptance", "accept2", "laccept-5f0c1d2e", "dev-accept-5f0c1d2e"])
def test_a_name_outside_the_gates_reach_is_a_users(tmp_path, name):
    assert load_environment(write(tmp_path, with_change("name", name), name)).name == name


def gate_document(tmp_path) -> tuple[dict, object]:
    pipeline = gate_pipeline(tmp_path)
    return acceptance_environment(pipeline, GATE_NAME, IMAGE), pipeline


def test_the_gates_own_environment_passes_against_the_pipeline_with_the_gate(tmp_path, monkeypatch):
    document, pipeline = gate_document(tmp_path)
    path = write(tmp_path, document, GATE_NAME)
    assert check_environment(path, pipeline) == (load_environment(path), [])
    # As `cdk deploy -c env=NAME` (app.py) loads it in the gate's build.
    monkeypatch.setenv(ENVIRONMENTS_DIR_VARIABLE, str(tmp_path))
    assert load_named_environment(GATE_NAME, pipeline).ami.id == IMAGE


def test_an_environment_of_the_gates_form_that_is_not_the_gates_file_is_refused(tmp_path):
    document, pipeline = gate_document(tmp_path)
    document = changed({"capacity.on_demand": 1, "storage": {"lustre": {"deployment_type": "SCRATCH_2"}}}, document)
    path = write(tmp_path, document, GATE_NAME)
    with pytest.raises(GpufleetError) as raised:
        check_environment(path, pipeline)
    assert list(raised.value.problems) == [
        f"{path}: {GATE_FORM}, but not the file `gpufleet ami acceptance-environment` writes for the pipeline's gate "
        "(capacity, storage differ; choose a name that is neither accept nor accept-...)"
    ]


def test_a_users_environment_under_a_gate_name_is_refused_by_what_differs(tmp_path):
    _, pipeline = gate_document(tmp_path)
    path = write(tmp_path, with_change("name", GATE_NAME), GATE_NAME)
    with pytest.raises(GpufleetError) as raised:
        check_environment(path, pipeline)
    assert list(raised.value.problems) == [
        f"{path}: {GATE_FORM}, but not the file `gpufleet ami acceptance-environment` writes for the pipeline's gate "
        "(network, capacity, fleet, ami, tags differ; choose a name that is neither accept nor accept-...)"
    ]


def test_with_the_gate_off_no_environment_has_a_gate_name(tmp_path):
    document, _ = gate_document(tmp_path)
    path = write(tmp_path, document, GATE_NAME)
    with pytest.raises(GpufleetError) as raised:
        check_environment(path, load_pipeline())  # ami/pipeline.yaml ships the gate off
    assert list(raised.value.problems) == [
        f"{path}: {GATE_FORM}, and the pipeline's gate is off (acceptance: null; choose a name that is neither accept "
        "nor accept-...)"
    ]


def test_gpufleet_validate_refuses_a_gate_name_and_passes_the_gates_file(tmp_path, monkeypatch, capsys):
    document, _ = gate_document(tmp_path)
    monkeypatch.setenv(PIPELINE_FILE_VARIABLE, str(tmp_path / "pipeline.yaml"))
    gate = write(tmp_path, document, GATE_NAME)
    assert main(["validate", str(gate)]) == 0
    assert capsys.readouterr().out == f"{gate}: ok ({GATE_NAME}: 2 x p4d.24xlarge in us-east-1a)\n"
    users = tmp_path / "users"
    users.mkdir()
    lab, user_gate = write(users, VALID), write(users, with_change("name", "accept-lab"), "accept-lab")
    assert main(["validate", str(lab), str(user_gate)]) == 1
    assert capsys.readouterr().err == f"{user_gate}: name: 'accept-lab' {RESERVED}\n"


def test_the_reserved_prefix_is_the_gates_grants_and_names():
    """The prefix is the pattern of the gate's IAM and Run Command conditions, and the names the pipeline's scripts
    give the gate's environments have the form that passes."""
    from stacks.constructs.ami_acceptance_gate import ACCEPTANCE_ENVIRONMENTS, ACCEPTANCE_STACKS

    assert ACCEPTANCE_ENVIRONMENTS == f"{ACCEPTANCE_NAME_PREFIX}*"
    assert ACCEPTANCE_STACKS == f"gpufleet-{ACCEPTANCE_NAME_PREFIX}*"
    arn = "arn:aws:codebuild:us-east-1:123456789012:build/gpufleet-ami:5f0c1d2e-8a4b-4c3d-9e2f-0123456789ab"
    named = subprocess.run(
        ["bash", "-c", f'source "{REPOSITORY}/scripts/lib/pipeline.sh"; acceptance_environment_name "$1"', "-", arn],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert named.stdout == f"{GATE_NAME}\n"
    assert GATE_ENVIRONMENT_NAME.fullmatch(named.stdout.strip())
