"""Synthesis benchmark: prints figures and ratios, asserts nothing (goals are printed beside the figures).

1. `cdk synth` of every shipped environment against a minimal one-stack CDK Python app synthesized the same way
   (same pinned CLI, same interpreter) in the same run. Goal: at most 1.5x.
2. Marginal cost per environment: synthesis of 1 and of 16 generated environments. Goal: at most 0.4 s each.
Each case runs REPEATS times; the median is reported.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CDK = ROOT / "node_modules" / ".bin" / "cdk"
REPEATS = int(os.environ.get("GPUFLEET_BENCH_REPEATS", "3"))
RATIO_GOAL = 1.5
MARGINAL_GOAL_SECONDS = 0.4

MINIMAL_APP = """
import aws_cdk as cdk
from aws_cdk import aws_sns as sns

app = cdk.App()
stack = cdk.Stack(app, "minimal", env=cdk.Environment(account="123456789012", region="us-east-1"))
sns.Topic(stack, "Topic")
app.synth()
"""


def time_synth(app_dir: Path, app_command: str, extra_env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as out:
            env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"} | (extra_env or {})
            command = [str(CDK), "synth", "--quiet", "--app", app_command, "--output", out]
            started = time.perf_counter()
            subprocess.run(command, cwd=app_dir, env=env, check=True, capture_output=True)
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def generated_environments(directory: Path, count: int) -> Path:
    template = yaml.safe_load((ROOT / "environments" / "dev.yaml").read_text())
    for index in range(count):
        name = f"bench{index:02d}"
        (directory / f"{name}.yaml").write_text(
            yaml.safe_dump(template | {"name": name, "network": {"cidr": f"10.{index}.0.0/16"}})
        )
    return directory


def main() -> int:
    python = sys.executable
    app = f"{python} app.py"
    print(f"cdk synth, median of {REPEATS} run(s) each (pinned CLI {CDK.relative_to(ROOT)})")
    with tempfile.TemporaryDirectory() as minimal_dir:
        Path(minimal_dir, "app.py").write_text(MINIMAL_APP)
        minimal = time_synth(Path(minimal_dir), f"{python} app.py")
    shipped = time_synth(ROOT, app)
    shipped_count = len(list((ROOT / "environments").glob("*.yaml")))
    print(f"  minimal one-stack app            {minimal:6.2f} s")
    print(f"  all {shipped_count} shipped environments       {shipped:6.2f} s")
    ratio = shipped / minimal
    verdict = "met" if ratio <= RATIO_GOAL else "NOT met"
    print(f"  ratio                            {ratio:6.2f} x   (goal <= {RATIO_GOAL} x: {verdict})")

    timings = {}
    for count in (1, 16):
        with tempfile.TemporaryDirectory() as environments:
            directory = generated_environments(Path(environments), count)
            timings[count] = time_synth(ROOT, app, {"GPUFLEET_ENVIRONMENTS_DIR": str(directory)})
        print(f"  {count:2d} generated environment(s)     {timings[count]:6.2f} s")
    marginal = (timings[16] - timings[1]) / 15
    verdict = "met" if marginal <= MARGINAL_GOAL_SECONDS else "NOT met"
    print(f"  marginal cost per environment    {marginal:6.2f} s   (goal <= {MARGINAL_GOAL_SECONDS} s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
