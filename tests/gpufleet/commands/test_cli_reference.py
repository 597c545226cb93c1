"""docs/reference/cli.md is the reference generated from the argument parser: it cannot drift from the options.

It is argparse's own help text, so a Python whose argparse formats help differently (another minor version) renders
another page: regenerate it with the Python of the project's virtualenv."""

from __future__ import annotations

from pathlib import Path

from gpufleet.cli import build_parser
from gpufleet.commands import cli_reference


def test_committed_reference_matches_the_parser():
    """A drift check only: what the rendering must say is stated literally in the tests below."""
    committed = Path("docs/reference/cli.md").read_text()
    assert committed == cli_reference.render_reference(build_parser()), (
        "regenerate: gpufleet cli-reference > docs/reference/cli.md"
    )


def test_every_command_and_sub_command_has_a_section_in_help_order():
    headings = [line for line in cli_reference.render_reference(build_parser()).splitlines() if line.startswith("## ")]
    assert headings == [
        "## gpufleet",
        "## gpufleet validate",
        "## gpufleet summary",
        "## gpufleet reachability",
        "## gpufleet environment-reference",
        "## gpufleet ami-profile-reference",
        "## gpufleet cli-reference",
        "## gpufleet ami",
        "## gpufleet ami list",
        "## gpufleet ami prune",
        "## gpufleet ami check",
        "## gpufleet ami render",
        "## gpufleet ami validate",
        "## gpufleet ami acceptance-environment",
        "## gpufleet preflight",
        "## gpufleet up",
        "## gpufleet down",
        "## gpufleet plan",
        "## gpufleet cost",
        "## gpufleet status",
        "## gpufleet hosts",
        "## gpufleet run",
        "## gpufleet runs",
        "## gpufleet stop",
        "## gpufleet logs",
        "## gpufleet acceptance",
        "## gpufleet rehearse",
        "## gpufleet k8s",
        "## gpufleet k8s efa-info",
        "## gpufleet k8s nccl-test",
        "## gpufleet nccl-report",
        "## gpufleet topo-check",
    ]


def test_a_section_is_the_summary_then_the_help_at_100_columns_whatever_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    assert (
        "\n## gpufleet ami prune\n\n"
        "deregister old unused images and delete their snapshots (dry run without --yes)\n\n"
        "```text\n"
        "usage: gpufleet ami prune [-h] (--region REGION | --env ENV) [--profile PROFILE] [--json] --keep N\n"
        "                          [--yes]\n"
        "\n"
        "options:\n"
        "  -h, --help         show this help message and exit\n"
        "  --region REGION    AWS region of the images\n"
        "  --env ENV          use the region of environments/ENV.yaml\n"
        "  --profile PROFILE  only images of this AMI profile (tag gpufleet:profile)\n"
        "  --json             print JSON instead of a table\n"
        "  --keep N           newest images kept per profile\n"
        "  --yes              really deregister and delete (default: only list)\n"
        "```\n"
    ) in cli_reference.render_reference(build_parser())


def test_the_top_level_section_has_no_summary_and_an_epilog_stays():
    reference = cli_reference.render_reference(build_parser())
    assert "\n## gpufleet\n\n```text\nusage: gpufleet [-h] COMMAND ...\n" in reference
    assert (
        "exit codes: 0 every price read; 3 some price could not be read (the totals are incomplete); 1 the\n"
        "environment or AWS failed\n```\n"
    ) in reference
