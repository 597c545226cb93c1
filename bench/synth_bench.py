"""Synthesis benchmark: prints figures and ratios, asserts nothing (goals are printed beside the figures).

1. `cdk synth` of every shipped environment as `make synth` runs it, against a minimal one-stack CDK Python app
   synthesized with the CDK's defaults (same pinned CLI, same interpreter) in the same run. Goal: at most 1.3x.
   `make synth` turns off aws-cdk-lib's built-in CloudFormation validator (MAKE_SYNTH_ENV): its next step runs
   cfn-lint, whose rules the validator's engine reuses, over every template, and fails on an error where the
   validator only warns. The like-for-like ratio (gpufleet with the validator too) is printed beside it.
2. Where the time of each goes, phase by phase, with what the shipped app spends beyond the minimal one: runs
   through bench/synth_phases.py, which runs the app unchanged and notes when each phase ended, with aws-cdk-lib's
   own performance counters splitting the synthesis. Counting slows a run, so these runs are not the ones timed in 1.
3. Marginal cost per environment: synthesis of 1 and of 16 generated environments. Goal: at most 0.4 s each.
Each case runs REPEATS times; the median is reported. The machine is shared: compare the figures of one run with each
other, not with another run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CDK = ROOT / "node_modules" / ".bin" / "cdk"
PHASES_DRIVER = ROOT / "bench" / "synth_phases.py"
REPEATS = int(os.environ.get("GPUFLEET_BENCH_REPEATS", "3"))
RATIO_GOAL = 1.3
# What `make synth` sets for its `cdk synth` (the Makefile's synth recipe; tests/bench/test_synth_bench.py holds the
# two together): aws-cdk-lib 2.275 skips its built-in validator when CDK_VALIDATION is "false"
# (core/lib/private/synthesis-validation.js, defaultValidationEnabled).
MAKE_SYNTH_ENV = {"CDK_VALIDATION": "false"}
MARGINAL_GOAL_SECONDS = 0.4

# The CDK CLI has the app write aws-cdk-lib's performance counters (milliseconds) to performance-counters.json in the
# output directory (aws-cdk 2.1148.1 lib/index.js sets CDK_PERF_COUNTERS_FILE); aws-cdk-lib 2.275.0 writes them only
# when the synthesis took at least the context value @aws-cdk/core.slowSynthThreshold per stack (default 10000 ms):
# core/lib/app.js, emitPerformanceCountersFile and shouldReportSlowSynth. The counter names are internal to
# aws-cdk-lib: validateTemplates (core/lib/private/synthesis-validation.js: every validation plugin, with the
# CloudFormation validator's start), CloudFormationValidate.validate (core/lib/validation/
# cloudformation-validate-plugin.js: its checks of the templates), FileSystem.fingerprint and FileSystem.copyDirectory
# (core/lib/fs/index.js: asset staging). Without them the synthesis is shown unsplit.
COUNTERS_FILE = "performance-counters.json"
SLOW_SYNTH_THRESHOLD_CONTEXT = "@aws-cdk/core.slowSynthThreshold"

CLI = "CDK CLI, Python start and exit"
IMPORT_CDK = "import aws_cdk (jsii kernel start)"
APP_IMPORTS = "app imports (cdk-nag, stacks, gpufleet)"
CONSTRUCTION = "construction (config, constructs)"
ASSET_STAGING = "  of which asset hashing and copying"
TEMPLATE_CHECKS = "synth: CloudFormation validator's checks"
VALIDATION_PLUGINS = "synth: validator start, cdk-nag, report"
SYNTH_REST = "synth: prepare, resolve, write"
SYNTH_UNSPLIT = "synth (no CDK counters to split it)"
KERNEL_EXIT = "jsii kernel exit"
TOTAL = "total (cdk synth)"
# Table order; ASSET_STAGING is part of CONSTRUCTION, every other phase adds up to TOTAL.
PHASES = [
    CLI,
    IMPORT_CDK,
    APP_IMPORTS,
    CONSTRUCTION,
    ASSET_STAGING,
    TEMPLATE_CHECKS,
    VALIDATION_PLUGINS,
    SYNTH_REST,
    SYNTH_UNSPLIT,
    KERNEL_EXIT,
    TOTAL,
]

MINIMAL_APP = """
import aws_cdk as cdk
from aws_cdk import aws_sns as sns

app = cdk.App()
stack = cdk.Stack(app, "minimal", env=cdk.Environment(account="123456789012", region="us-east-1"))
sns.Topic(stack, "Topic")
app.synth()
"""


@dataclass(frozen=True)
class SynthRun:
    seconds: float  # the whole `cdk synth`
    phases: dict[str, float]  # seconds by phase (names of PHASES)


def phase_seconds(
    started: float, finished: float, marks: dict[str, float], counters: dict[str, int]
) -> dict[str, float]:
    """The phases of one `cdk synth` that ran from STARTED to FINISHED (time.time()), from bench/synth_phases.py's
    MARKS and aws-cdk-lib's COUNTERS (milliseconds; empty when it wrote none)."""
    phases = {
        CLI: (marks["started"] - started) + (finished - marks["kernel_stopped"]),
        IMPORT_CDK: marks["aws_cdk_imported"] - marks["started"],
        APP_IMPORTS: marks["app_created"] - marks["aws_cdk_imported"],
        CONSTRUCTION: marks["synth_started"] - marks["app_created"],
    }
    synth = marks["synth_finished"] - marks["synth_started"]
    if "validateTemplates" in counters and "CloudFormationValidate.validate" in counters:
        validation = counters["validateTemplates"] / 1000
        template_checks = counters["CloudFormationValidate.validate"] / 1000
        phases[ASSET_STAGING] = (
            counters.get("FileSystem.fingerprint", 0) + counters.get("FileSystem.copyDirectory", 0)
        ) / 1000
        phases[TEMPLATE_CHECKS] = template_checks
        phases[VALIDATION_PLUGINS] = validation - template_checks
        phases[SYNTH_REST] = synth - validation
    else:
        phases[SYNTH_UNSPLIT] = synth
    phases[KERNEL_EXIT] = marks["kernel_stopped"] - marks["synth_finished"]
    phases[TOTAL] = finished - started
    return phases


def median_run(runs: list[SynthRun]) -> SynthRun:
    """The run whose time is the median (the lower middle one of an even count), so its phases add up to it."""
    return sorted(runs, key=lambda run: run.seconds)[(len(runs) - 1) // 2]


def breakdown_lines(minimal: SynthRun, shipped: SynthRun) -> list[str]:
    """Both runs phase by phase, and what the shipped app spends beyond the minimal one."""
    lines = [f"  {'phase':44s} {'minimal':>8s} {'gpufleet':>9s} {'extra':>8s}"]
    for phase in PHASES:
        if phase not in minimal.phases and phase not in shipped.phases:
            continue
        cells = [
            f"{seconds:6.2f} s" if (seconds := run.phases.get(phase)) is not None else "     n/a"
            for run in (minimal, shipped)
        ]
        extra = (
            f"{shipped.phases[phase] - minimal.phases[phase]:+6.2f} s"
            if phase in minimal.phases and phase in shipped.phases
            else "     n/a"
        )
        lines.append(f"  {phase:44s} {cells[0]:>8s} {cells[1]:>9s} {extra:>8s}")
    return lines


def goal_verdict(value: float, goal: float) -> str:
    return "met" if value <= goal else "NOT met"


def plain_seconds(app_dir: Path, app_file: str, extra_env: dict[str, str] | None = None) -> float:
    """The median time of REPEATS plain `cdk synth --quiet` runs of the app, nothing counted."""
    samples = []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as scratch:
            env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"} | (extra_env or {})
            command = [str(CDK), "synth", "--quiet", "--app", f"{sys.executable} {app_file}", "--output", scratch]
            started = time.perf_counter()
            subprocess.run(command, cwd=app_dir, env=env, check=True, capture_output=True)
            samples.append(time.perf_counter() - started)
    return sorted(samples)[(len(samples) - 1) // 2]


def synth_runs(app_dir: Path, app_file: str, extra_env: dict[str, str] | None = None) -> list[SynthRun]:
    runs = []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as scratch:
            out, marks_file = Path(scratch, "cdk.out"), Path(scratch, "marks.json")
            counters_file = out / COUNTERS_FILE
            env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"} | (extra_env or {})
            command = [
                str(CDK),
                "synth",
                "--quiet",
                "--app",
                f"{sys.executable} {PHASES_DRIVER} {marks_file} {app_file}",
                "--output",
                str(out),
                "--context",
                f"{SLOW_SYNTH_THRESHOLD_CONTEXT}=0",
            ]
            started = time.time()
            subprocess.run(command, cwd=app_dir, env=env, check=True, capture_output=True)
            finished = time.time()
            marks = json.loads(marks_file.read_text())
            counters = json.loads(counters_file.read_text())["counters"] if counters_file.exists() else {}
            runs.append(SynthRun(finished - started, phase_seconds(started, finished, marks, counters)))
    return runs


def generated_environments(directory: Path, count: int) -> Path:
    template = yaml.safe_load((ROOT / "environments" / "dev.yaml").read_text())
    for index in range(count):
        name = f"bench{index:02d}"
        (directory / f"{name}.yaml").write_text(
            yaml.safe_dump(template | {"name": name, "network": {"cidr": f"10.{index}.0.0/16"}})
        )
    return directory


def main() -> int:
    print(f"cdk synth, median of {REPEATS} run(s) each (pinned CLI {CDK.relative_to(ROOT)})")
    shipped_count = len(list((ROOT / "environments").glob("*.yaml")))
    with tempfile.TemporaryDirectory() as minimal_dir:
        Path(minimal_dir, "app.py").write_text(MINIMAL_APP)
        minimal_seconds = plain_seconds(Path(minimal_dir), "app.py")
        as_make_synth = plain_seconds(ROOT, "app.py", MAKE_SYNTH_ENV)
        with_validator = plain_seconds(ROOT, "app.py")
        minimal = median_run(synth_runs(Path(minimal_dir), "app.py"))
    shipped = median_run(synth_runs(ROOT, "app.py"))
    ratio = as_make_synth / minimal_seconds
    print(f"  minimal one-stack app (CDK defaults)                {minimal_seconds:6.2f} s")
    print(f"  all {shipped_count} shipped environments, as make synth runs it  {as_make_synth:6.2f} s")
    print(
        f"  ratio                                               {ratio:6.2f} x   "
        f"(goal <= {RATIO_GOAL} x: {goal_verdict(ratio, RATIO_GOAL)})"
    )
    print(
        f"  like for like, with the CDK's validator too         {with_validator:6.2f} s   "
        f"{with_validator / minimal_seconds:.2f} x"
    )
    print("where the time goes (the median counted run of each, both with the CDK's validator):")
    print("\n".join(breakdown_lines(minimal, shipped)))

    timings = {}
    for count in (1, 16):
        with tempfile.TemporaryDirectory() as environments:
            directory = generated_environments(Path(environments), count)
            timings[count] = plain_seconds(
                ROOT, "app.py", MAKE_SYNTH_ENV | {"GPUFLEET_ENVIRONMENTS_DIR": str(directory)}
            )
        print(f"  {count:2d} generated environment(s), as make synth runs it  {timings[count]:6.2f} s")
    marginal = (timings[16] - timings[1]) / 15
    verdict = goal_verdict(marginal, MARGINAL_GOAL_SECONDS)
    print(f"  marginal cost per environment    {marginal:6.2f} s   (goal <= {MARGINAL_GOAL_SECONDS} s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
