"""gpufleet reachability over small hand-written assemblies: what it prints and its exit code, and one line naming the
file for an assembly it cannot read. (The shipped environments and the test matrix: tests/stacks/test_reachability.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli import main
from tests.gpufleet.reachability.test_rules import NETWORK, function, planted


def write_assembly(directory: Path, resources: dict, *, environment: str = "aws://123456789012/eu-west-1") -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "manifest.json").write_text(
        json.dumps(
            {
                "version": "48.0.0",
                "artifacts": {
                    "net": {
                        "type": "aws:cloudformation:stack",
                        "environment": environment,
                        "properties": {"templateFile": "net.template.json"},
                    },
                    "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
                },
            }
        )
    )
    (directory / "net.template.json").write_text(json.dumps({"Resources": resources}))
    return directory


def test_every_call_with_a_route_exits_0(tmp_path, capsys):
    cdk_out = write_assembly(tmp_path / "cdk.out", planted(Caller=function("Private", "s3", "https://pypi.org")))
    assert main(["reachability", str(cdk_out)]) == 0
    assert capsys.readouterr().out == "reachability: every call checked here has a route\n"


def test_a_call_without_a_route_exits_1_with_its_line(tmp_path, capsys):
    cdk_out = write_assembly(tmp_path / "cdk.out", planted(Caller=function("Isolated", "https://pypi.org")))
    assert main(["reachability", str(cdk_out)]) == 1
    assert capsys.readouterr().out == (
        "Lambda function Caller in net cannot reach https://pypi.org from Isolated in net: its route table "
        "IsolatedTable in net has no route to a NAT or internet gateway\n"
        "reachability: 1 problem(s) above\n"
    )


def test_a_caller_not_checked_here_is_listed_and_passes(tmp_path, capsys):
    caller = function("Isolated", "s3")
    caller["Properties"]["VpcConfig"]["SubnetIds"] = ["subnet-0123456789abcdef0"]
    cdk_out = write_assembly(tmp_path / "cdk.out", planted(Caller=caller))
    assert main(["reachability", str(cdk_out)]) == 0
    assert capsys.readouterr().out == (
        "Lambda function Caller in net: not checked here (its subnet subnet-0123456789abcdef0 is not described here): "
        "gpufleet preflight checks it\n"
        "reachability: every call checked here has a route\n"
    )


def test_an_environment_agnostic_stack_cannot_say_where_s3_without_a_region_goes(tmp_path, capsys):
    cdk_out = write_assembly(
        tmp_path / "cdk.out",
        planted(Caller=function("Isolated", "s3-global")),
        environment="aws://unknown-account/unknown-region",
    )
    assert main(["reachability", str(cdk_out)]) == 0
    assert capsys.readouterr().out == (
        "Lambda function Caller in net: not checked here (its stack names no region, and where S3 without a region "
        "leads depends on it): gpufleet preflight checks it\n"
        "reachability: every call checked here has a route\n"
    )


def test_no_assembly_is_one_line(tmp_path, capsys):
    assert main(["reachability", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"{tmp_path}: no cloud assembly here (run `cdk synth` first)\n"


@pytest.mark.parametrize(
    ("break_it", "line"),
    [
        (
            lambda d: (d / "net.template.json").write_text("{"),
            "net.template.json: line 1 column 2: not valid JSON (Expecting property name enclosed in double quotes); "
            "synthesize it again (make synth)",
        ),
        (
            lambda d: (d / "net.template.json").write_text("[]"),
            "net.template.json: (file): expected an object, got []; synthesize it again (make synth)",
        ),
        (
            lambda d: (d / "net.template.json").unlink(),
            "net.template.json: cannot read file (No such file or directory)",
        ),
    ],
)
def test_an_assembly_it_cannot_read_is_one_line_naming_the_file(tmp_path, capsys, break_it, line):
    cdk_out = write_assembly(tmp_path / "cdk.out", NETWORK)
    break_it(cdk_out)
    assert main(["reachability", str(cdk_out)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and line in error, error


@pytest.mark.parametrize(
    ("artifact", "line"),
    [
        (
            {"environment": "us-east-1", "properties": {"templateFile": "net.template.json"}},
            'manifest.json: artifacts.net.environment: expected aws://ACCOUNT/REGION, got "us-east-1"',
        ),
        (
            {"environment": "aws://123456789012/eu-west-1", "properties": {"templateFile": "../net.template.json"}},
            'manifest.json: artifacts.net.properties.templateFile: "../net.template.json" is not a file name',
        ),
        (
            {"environment": "aws://123456789012/eu-west-1"},
            "manifest.json: artifacts.net.properties: missing",
        ),
    ],
)
def test_a_manifest_it_cannot_read_is_one_line(tmp_path, capsys, artifact, line):
    cdk_out = write_assembly(tmp_path / "cdk.out", NETWORK)
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    manifest["artifacts"]["net"] = {"type": "aws:cloudformation:stack", **artifact}
    (cdk_out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["reachability", str(cdk_out)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and line in error, error
