"""The figures of `make bench` (bench/synth_bench.py): the phases of one `cdk synth` from the driver's marks and
aws-cdk-lib's counters, the run that stands for a case, and the table of both apps side by side."""

from __future__ import annotations

import pytest

from bench.synth_bench import MAKE_SYNTH_ENV, ROOT, SynthRun, breakdown_lines, goal_verdict, median_run, phase_seconds

# A run from 100.0 to 110.0 (time.time()): the interpreter up at 100.5, aws_cdk imported at 101.5, the app's first
# cdk.App() at 102.0, app.synth() from 104.0 to 108.0, the jsii kernel gone at 109.0.
MARKS = {
    "started": 100.5,
    "aws_cdk_imported": 101.5,
    "app_created": 102.0,
    "synth_started": 104.0,
    "synth_finished": 108.0,
    "kernel_stopped": 109.0,
}
COUNTERS = {
    "validateTemplates": 3000,
    "validateTemplates(cnt)": 1,
    "CloudFormationValidate.validate": 1250,
    "FileSystem.fingerprint": 200,
    "FileSystem.copyDirectory": 50,
    "phase:Synthesis": 3900,
}


def test_phases_add_up_to_the_run_and_split_the_synthesis_by_the_cdk_counters():
    assert phase_seconds(100.0, 110.0, MARKS, COUNTERS) == {
        "CDK CLI, Python start and exit": 1.5,
        "import aws_cdk (jsii kernel start)": 1.0,
        "app imports (cdk-nag, stacks, gpufleet)": 0.5,
        "construction (config, constructs)": 2.0,
        "  of which asset hashing and copying": 0.25,
        "synth: CloudFormation validator's checks": 1.25,
        "synth: validator start, cdk-nag, report": 1.75,
        "synth: prepare, resolve, write": 1.0,
        "jsii kernel exit": 1.0,
        "total (cdk synth)": 10.0,
    }


def test_without_cdk_counters_the_synthesis_is_one_phase():
    phases = phase_seconds(100.0, 110.0, MARKS, {})
    assert list(phases) == [
        "CDK CLI, Python start and exit",
        "import aws_cdk (jsii kernel start)",
        "app imports (cdk-nag, stacks, gpufleet)",
        "construction (config, constructs)",
        "synth (no CDK counters to split it)",
        "jsii kernel exit",
        "total (cdk synth)",
    ]
    assert phases["synth (no CDK counters to split it)"] == 4.0


def test_an_app_without_asset_staging_counters_stages_nothing():
    counters = {"validateTemplates": 3000, "CloudFormationValidate.validate": 1250}
    assert phase_seconds(100.0, 110.0, MARKS, counters)["  of which asset hashing and copying"] == 0.0


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.0), ([5.0], 5.0)],
)
def test_the_median_run_is_the_middle_one_by_time(seconds, expected):
    runs = [SynthRun(value, {"total (cdk synth)": value}) for value in seconds]
    assert median_run(runs).seconds == expected


def test_the_breakdown_shows_both_apps_and_the_extra_and_n_a_where_a_phase_is_missing():
    minimal = SynthRun(
        4.0, {"jsii kernel exit": 0.5, "synth (no CDK counters to split it)": 1.25, "total (cdk synth)": 4.0}
    )
    shipped = SynthRun(6.5, {"jsii kernel exit": 0.75, "synth: prepare, resolve, write": 2.0, "total (cdk synth)": 6.5})
    assert breakdown_lines(minimal, shipped) == [
        "  phase                                         minimal  gpufleet    extra",
        "  synth: prepare, resolve, write                    n/a    2.00 s      n/a",
        "  synth (no CDK counters to split it)            1.25 s       n/a      n/a",
        "  jsii kernel exit                               0.50 s    0.75 s  +0.25 s",
        "  total (cdk synth)                              4.00 s    6.50 s  +2.50 s",
    ]


@pytest.mark.parametrize(("value", "expected"), [(1.29, "met"), (1.3, "met"), (1.31, "NOT met")])
def test_a_goal_is_met_at_or_under_it(value, expected):
    assert goal_verdict(value, 1.3) == expected


def test_the_bench_times_synthesis_the_way_make_synth_runs_it():
    """MAKE_SYNTH_ENV is what the Makefile's synth recipe sets for `cdk synth`, and cfn-lint runs over every template
    right after it: turning off aws-cdk-lib's validator there leaves the templates checked."""
    recipe = makefile_recipe("synth")
    assert MAKE_SYNTH_ENV == {"CDK_VALIDATION": "false"}
    synth_line = next(line for line in recipe if " cdk synth " in f" {line} ")
    assert synth_line == "CDK_VALIDATION=false cdk synth --quiet"
    assert recipe.index(synth_line) < next(i for i, line in enumerate(recipe) if line.startswith("cfn-lint "))


def makefile_recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip().lstrip("@"))
    return recipe
