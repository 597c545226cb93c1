"""`gpufleet up` brought the box's cluster up (tests/box/conftest.py): what it printed at each stage, read back.

The box's environment file exists (prod's, two nodes), so stage 1 reads it; the account has no CDK bootstrap yet, so
stage 3 runs `cdk bootstrap`; the deploy goes to the box through the CDK CLI's stand-in; the nodes are the box's real
systemd nodes, whose setup steps the progress view shows as they start; acceptance runs on them for real (its
nvidia-smi, fi_info and nccl-tests are the box's stand-ins: the numbers are not measurements)."""

from __future__ import annotations

import json
import re

from gpufleet.catalog import load_catalog
from gpufleet.reports.acceptance import REPORT_JSON
from gpufleet.user_data import setup_scripts

STAMP = r"\d\d:\d\d"


def stage_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("[")]


def test_up_runs_every_stage_in_order_and_succeeds(box_cluster):
    up = box_cluster.up
    env = box_cluster.cluster.env

    assert up.returncode == 0, "\n".join(up.lines)
    stages = stage_lines(up.lines)
    assert [line.split(":")[0] for line in stages] == [
        "[1/6] environment",
        "[2/6] preflight",
        "[3/6] CDK bootstrap",
        "[4/6] deploy",
        "[5/6] nodes",
        "[6/6] acceptance",
    ]
    assert stages[0] == (
        f"[1/6] environment: {box_cluster.cluster.environments_dir}/prod.yaml "
        "(2 x p4d.24xlarge, 1 on-demand and 1 spot, in us-east-1b, shared storage)"
    )
    assert stages[2] == "[3/6] CDK bootstrap: aws://123456789012/us-east-1 (none yet): cdk bootstrap"
    assert stages[3] == "[4/6] deploy: the stacks of prod (cdk deploy)"
    assert stages[4] == "[5/6] nodes: waiting for 2 nodes to be ready (at most 40 min)"
    assert up.lines[-1] == (
        "prod is up: `gpufleet run prod --torchrun -- train.py` starts a job (docs/guides/first-job.md)"
    )
    assert env.name == "prod"


def test_preflight_passed_against_the_emulator(box_cluster):
    stages = stage_lines(box_cluster.up.lines)

    assert re.fullmatch(r"\[2/6\] preflight: \d+ passed, \d+ warned, 0 failed", stages[1]), stages[1]


def test_the_cdk_cli_was_asked_to_bootstrap_then_deploy_only_this_environment(box_cluster):
    calls = [
        json.loads(line) for line in (box_cluster.cluster.directory / "cdk" / "calls.jsonl").read_text().splitlines()
    ]

    assert calls == [
        ["bootstrap", "aws://123456789012/us-east-1"],
        [
            "deploy",
            "--all",
            "-c",
            "env=prod",
            "--require-approval",
            "never",
            "--import-existing-resources",
            "--progress",
            "events",
        ],
    ]


def test_the_progress_view_shows_each_node_through_each_setup_step_to_ready(box_cluster):
    up = box_cluster.up
    cluster = box_cluster.cluster
    steps = setup_scripts(cluster.env, load_catalog()[cluster.env.instance_type])
    marked = [name for name in steps if name not in ("node-ready", "join-runs")]

    for node in (box_cluster.head, box_cluster.spot):
        market = "on-demand" if node is box_cluster.head else "spot"
        prefix = re.compile(rf"  {STAMP} {node.instance_id} \({market} {re.escape(node.spec.address)}\): (.*)")
        states = [match.group(1) for line in up.lines if (match := prefix.fullmatch(line))]
        # Every state is a step in order, and the last is ready; polls may fall between two quick steps.
        assert states[-1] == "ready", states
        seen_steps = [state.removeprefix("booting: step ") for state in states if state.startswith("booting: step ")]
        positions = [marked.index(step.split(" ", 1)[1]) for step in seen_steps]
        assert positions == sorted(positions), states
        assert all(
            step == f"{marked.index(step.split(' ', 1)[1]) + 1}/{len(steps)} {step.split(' ', 1)[1]}"
            for step in seen_steps
        )
        assert seen_steps, f"no setup step seen for {node.instance_id}: {states}"


def test_the_count_line_ends_with_every_node_ready(box_cluster):
    counts = [line for line in box_cluster.up.lines if re.fullmatch(rf"  {STAMP} \d+ of 2 nodes ready.*", line)]

    assert counts[-1].endswith(" 2 of 2 nodes ready")


def test_acceptance_ran_on_both_nodes_and_wrote_its_report(box_cluster):
    up = box_cluster.up

    report = json.loads((up.report_dir / REPORT_JSON).read_text())
    assert [node["instance_id"] for node in report["nodes"]] == [
        box_cluster.head.instance_id,
        box_cluster.spot.instance_id,
    ]
    assert any(line.startswith("cost so far: $") for line in up.lines), up.lines
    assert any(line.startswith("while it is up: $") for line in up.lines), up.lines
