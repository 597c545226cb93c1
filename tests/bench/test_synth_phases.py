"""bench/synth_phases.py runs a CDK app as `python APP_FILE` would and notes when each phase ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPOSITORY

# Imports a module beside it (as app.py imports stacks/) and ends with a status of its own after synthesizing.
APP = textwrap.dedent(
    """
    import sys

    import aws_cdk as cdk
    from beside import STACK_NAME

    app = cdk.App()
    cdk.Stack(app, STACK_NAME)
    app.synth()
    sys.exit(3)
    """
)


def test_the_app_runs_as_python_runs_it_and_every_phase_is_marked_in_order(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "beside.py").write_text('STACK_NAME = "marked"\n')
    marks_file, out = tmp_path / "marks.json", tmp_path / "cdk.out"
    # CDK_VALIDATION=false skips the CloudFormation validator's start, seconds that say nothing here (aws-cdk-lib
    # 2.275.0 core/lib/private/synthesis-validation.js, defaultValidationEnabled).
    env = os.environ | {"CDK_OUTDIR": str(out), "CDK_VALIDATION": "false"}
    command = [sys.executable, str(REPOSITORY / "bench" / "synth_phases.py"), str(marks_file), "app.py"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert (out / "marked.template.json").is_file()
    marks = json.loads(marks_file.read_text())
    assert list(marks) == [
        "started",
        "aws_cdk_imported",
        "app_created",
        "synth_started",
        "synth_finished",
        "kernel_stopped",
    ]
    assert list(marks.values()) == sorted(marks.values())
