"""gpufleet summary reads the clusters back from a synthesized cloud assembly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufleet.cli import main


def test_summary_table_lists_each_environment(assembly, capsys):
    assert main(["summary", str(assembly.directory)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ENVIRONMENT",
        "BACKEND",
        "INSTANCE",
        "TYPE",
        "NODES",
        "OD/SPOT",
        "GPUS",
        "EFA/NODE",
        "PLACEMENT",
        "AZ",
    ]
    rows = {line.split()[0]: " ".join(line.split()) for line in lines[1:]}
    # A Capacity Block's nodes are placed by EC2, not by the placement group.
    assert rows == {
        "dev": "dev spot-fleet p4d.24xlarge 1/1 16 x A100 4 cluster us-east-1a",
        "elastic": "elastic spot-fleet p5.48xlarge 1/1 16 x H100 32 cluster us-east-1a",
        "h100": "h100 spot-fleet p5.48xlarge 2/0 16 x H100 32 cluster us-west-2d",
        # The eks flavour: its GPU managed node groups, one on-demand and one spot.
        "p5-eks": "p5-eks eks p5.48xlarge 1/1 16 x H100 32 cluster us-west-2d",
        "p5-block": "p5-block auto-scaling p5.48xlarge 2/0 16 x H100 32 capacity-block us-east-2a",
        "prod": "prod spot-fleet p4d.24xlarge 2/6 64 x A100 4 cluster us-east-1b",
    }


def test_summary_json(assembly, capsys):
    assert main(["summary", str(assembly.directory), "--json"]) == 0
    by_name = {entry["environment"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert by_name["h100"]["efa_interfaces_per_node"] == 32
    assert by_name["dev"]["stack"] == "gpufleet-dev-cluster"
    assert {name: entry["backend"] for name, entry in by_name.items()} == {
        "dev": "spot-fleet",
        "elastic": "spot-fleet",
        "h100": "spot-fleet",
        "p5-block": "auto-scaling",
        "p5-eks": "eks",
        "prod": "spot-fleet",
    }


def test_summary_without_an_assembly_says_to_synthesize(tmp_path, capsys):
    assert main(["summary", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == f"{tmp_path}: no cloud assembly here (run `cdk synth` first)"


def _copy_of(assembly, tmp_path: Path) -> Path:
    """The files `gpufleet summary` reads of the synthesized assembly: the manifest and the cluster templates."""
    target = tmp_path / "cdk.out"
    target.mkdir()
    shutil.copy(assembly.directory / "manifest.json", target)
    for name in assembly.stack_names:
        if name.endswith(("-cluster", "-gpu-nodes")):
            shutil.copy(assembly.template_file(name), target)
    return target


def _edit_template(cdk_out: Path, edit) -> None:
    path = cdk_out / "gpufleet-dev-cluster.template.json"
    template = json.loads(path.read_text())
    edit(template)
    path.write_text(json.dumps(template))


def _edit_eks_template(cdk_out: Path, edit) -> None:
    path = cdk_out / "gpufleet-p5-eks-gpu-nodes.template.json"
    template = json.loads(path.read_text())
    edit(template)
    path.write_text(json.dumps(template))


def _drop_launch_templates(template: dict) -> None:
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::EKS::Nodegroup":
            resource["Properties"].pop("LaunchTemplate", None)


def _launch_template_data(template: dict) -> dict:
    (data,) = [
        r["Properties"]["LaunchTemplateData"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::LaunchTemplate"
    ]
    return data


FIX = "synthesize it again (make synth)"


# A damaged assembly (issue 23): each case ended in a traceback before (JSONDecodeError, UnicodeDecodeError,
# RecursionError, KeyError, AttributeError). Now one line names the file and where in it.
@pytest.mark.parametrize(
    "damage, file, problem",
    [
        (
            lambda out: (out / "manifest.json").write_text('{"artifacts": {"gpufleet-dev-cluster": {"type": "aws'),
            "manifest.json",
            f"line 1 column 49: not valid JSON (Unterminated string starting at); {FIX}",
        ),
        (
            lambda out: (out / "manifest.json").write_text("[" * 100_000),
            "manifest.json",
            f"not valid JSON (nested too deeply to read); {FIX}",
        ),
        (
            lambda out: (out / "manifest.json").write_text('{"artifacts": {"gpufleet-dev-cluster": {"type": 7}}}'),
            "manifest.json",
            f"artifacts.gpufleet-dev-cluster.type: expected a string, got 7; {FIX}",
        ),
        (
            lambda out: (out / "gpufleet-dev-cluster.template.json").write_bytes(
                b"\n\xff" + (out / "gpufleet-dev-cluster.template.json").read_bytes()
            ),
            "gpufleet-dev-cluster.template.json",
            f"line 2: not UTF-8 text (byte 0xff: invalid start byte); {FIX}",
        ),
        (
            lambda out: (out / "gpufleet-dev-cluster.template.json").write_text('{"Resources": []}'),
            "gpufleet-dev-cluster.template.json",
            f"Resources: expected an object, got []; {FIX}",
        ),
        (
            lambda out: _edit_template(out, lambda t: t["Outputs"].pop("AvailabilityZone")),
            "gpufleet-dev-cluster.template.json",
            f"Outputs.AvailabilityZone: missing; {FIX}",
        ),
        (
            lambda out: _edit_template(out, lambda t: _launch_template_data(t).update(InstanceType="p9.mega")),
            "gpufleet-dev-cluster.template.json",
            'Resources.NodeLaunchTemplateCABE86F2.Properties.LaunchTemplateData.InstanceType: "p9.mega" is not in '
            f"the instance catalog; {FIX}",
        ),
        (
            lambda out: _edit_eks_template(out, _drop_launch_templates),
            "gpufleet-p5-eks-gpu-nodes.template.json",
            f"Resources: no AWS::EKS::Nodegroup with a LaunchTemplate (the GPU node groups); {FIX}",
        ),
    ],
    ids=["truncated", "nested", "type", "not UTF-8", "resources", "output", "instance type", "eks without GPUs"],
)
def test_a_damaged_assembly_is_one_line_naming_the_file(assembly, capsys, tmp_path, damage, file, problem):
    cdk_out = _copy_of(assembly, tmp_path)
    damage(cdk_out)
    assert main(["summary", str(cdk_out)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{cdk_out / file}: {problem}"]


def test_a_manifest_far_larger_than_an_assembly_is_refused_unread(assembly, capsys, tmp_path):
    cdk_out = _copy_of(assembly, tmp_path)
    with (cdk_out / "manifest.json").open("wb") as handle:
        handle.truncate(256 * 1024 * 1024)  # sparse: nothing written
    assert main(["summary", str(cdk_out)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{cdk_out / 'manifest.json'}: larger than 16 MiB, far more than a file of a cloud assembly (tens of KB): "
        "refused unread"
    ]


def _capacity_block_node_groups(template: dict) -> None:
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::EKS::Nodegroup" and "LaunchTemplate" in resource["Properties"]:
            resource["Properties"]["CapacityType"] = "CAPACITY_BLOCK"


def test_summary_counts_an_eks_capacity_blocks_nodes_as_on_demand(assembly, tmp_path, capsys):
    cdk_out = _copy_of(assembly, tmp_path)
    _edit_eks_template(cdk_out, _capacity_block_node_groups)
    assert main(["summary", str(cdk_out)]) == 0
    [row] = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines() if line.startswith("p5-eks")]
    assert row == "p5-eks eks p5.48xlarge 2/0 16 x H100 32 cluster us-west-2d"
