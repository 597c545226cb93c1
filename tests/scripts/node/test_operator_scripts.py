"""operator-scripts.sh on a fake node: fake IMDSv2 and a fake AWS CLI serving the archive from a local file; the
archive is the one gpufleet/user_data.py makes, unpacked by the real tar and checked by the real sha256sum."""

from __future__ import annotations

import hashlib

import pytest

from gpufleet.user_data import operator_scripts_archive
from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import FAKE_COMMANDS, SCRIPTS_DIR

URL = "s3://cdk-hnb659fds-assets-123456789012-eu-west-1/0123abcd.gz"
METADATA = {"placement/region": [[200, "eu-west-1"]]}


@pytest.fixture
def ops_node(node, tmp_path):
    """A node with the AWS CLI whose bucket holds the real archive at URL."""
    archive = tmp_path / "archive.tar.gz"
    archive.write_bytes(operator_scripts_archive())
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    node.set_state(imds=METADATA, s3_objects={URL: str(archive)})
    return node


def install(node, check: bool = True, **settings: str):
    defaults = {
        "GPUFLEET_OPERATOR_SCRIPTS": URL,
        "GPUFLEET_OPERATOR_SCRIPTS_SHA256": hashlib.sha256(operator_scripts_archive()).hexdigest(),
        "GPUFLEET_IMDS_URL": "http://imds.test",
    }
    return node.run("operator-scripts.sh", check=check, **{**defaults, **settings})


def test_installs_the_operator_scripts_executable_and_as_written(ops_node):
    result = install(ops_node)

    ops = ops_node.root / "opt/gpufleet/ops"
    assert sorted(path.name for path in ops.iterdir()) == [
        "join-runs.sh",
        "node-health-check.sh",
        "run-nccl-tests.sh",
        "save-checkpoint.sh",
        "start-run.sh",
        "stop-run.sh",
    ]
    for path in ops.iterdir():
        # join-runs.sh is a setup step (scripts/node) that travels in the archive (ARCHIVED_SETUP_STEPS).
        source = SCRIPTS_DIR if path.name == "join-runs.sh" else SCRIPTS_DIR.parent / "ops"
        assert path.read_bytes() == (source / path.name).read_bytes()
        assert oct(path.stat().st_mode & 0o777) == "0o755"
    assert ops_node.calls("aws") == [
        ["s3", "cp", "--only-show-errors", "--region", "eu-west-1", URL, ops_node.calls("aws")[0][-1]]
    ]
    assert result.stdout == (
        "operator-scripts: installed node-health-check.sh run-nccl-tests.sh start-run.sh stop-run.sh "
        "save-checkpoint.sh join-runs.sh under /opt/gpufleet/ops\n"
    )


def test_running_again_installs_the_same_files(ops_node):
    install(ops_node)
    ops = ops_node.root / "opt/gpufleet/ops"
    before = {path.name: path.read_bytes() for path in ops.iterdir()}

    install(ops_node)

    assert {path.name: path.read_bytes() for path in ops.iterdir()} == before


def test_an_archive_other_than_the_expected_one_installs_nothing(ops_node):
    result = install(ops_node, check=False, GPUFLEET_OPERATOR_SCRIPTS_SHA256="0" * 64)

    assert result.returncode == 1
    assert result.stderr == (
        f"operator-scripts: error: {URL} is not the archive this node expects: its SHA-256 is not {'0' * 64}\n"
    )
    assert not (ops_node.root / "opt/gpufleet/ops").exists()


def test_an_object_that_is_not_there_fails_naming_it(ops_node):
    ops_node.set_state(imds=METADATA, s3_objects={})

    result = install(ops_node, check=False)

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"operator-scripts: error: cannot fetch the operator scripts from {URL} (see the AWS CLI's message above)"
    )


def test_without_the_aws_cli_it_fails_saying_so(node):
    node.set_state(imds=METADATA)

    result = install(node, check=False)

    assert result.returncode == 1
    assert result.stderr == (
        "operator-scripts: error: no AWS CLI on this node (aws is not on PATH) to fetch the operator scripts from "
        f"{URL}\n"
    )


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        (
            "GPUFLEET_OPERATOR_SCRIPTS",
            "https://example.com/ops.tar.gz",
            "must be s3://BUCKET/KEY, got 'https://example.com/ops.tar.gz'",
        ),
        ("GPUFLEET_OPERATOR_SCRIPTS_SHA256", "abc", "must be 64 hex digits, got 'abc'"),
    ],
)
def test_a_malformed_setting_fails_naming_it(ops_node, setting, value, message):
    result = install(ops_node, check=False, **{setting: value})

    assert result.returncode == 1
    assert result.stderr == f"operator-scripts: error: {setting} {message}\n"
