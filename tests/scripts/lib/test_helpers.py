"""scripts/lib/helpers.sh, the one library of the scripts of scripts/node, scripts/ops and scripts/pipeline: the
message helpers and the required-setting check (tests/scripts/test_shared_helpers.py: every script uses it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HELPERS = REPO / "scripts" / "lib" / "helpers.sh"


def run(tmp_path: Path, body: str, name: str = "probe-script.sh", **env: str) -> subprocess.CompletedProcess[str]:
    """BODY run by a script named NAME that sources the library as the scripts do, in strict mode."""
    script = tmp_path / name
    script.write_text(f'#!/usr/bin/env bash\nset -euo pipefail\nsource "{HELPERS}"\n{body}\n')
    script.chmod(0o755)
    return subprocess.run(
        [str(script)], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=30
    )


def test_messages_start_with_the_name_of_the_script(tmp_path):
    result = run(tmp_path, 'log "mounted /dev/md/scratch"; warn "clocks left as they are"; error "no GPUs"')

    assert result.returncode == 0
    assert result.stdout == "probe-script: mounted /dev/md/scratch\n"
    assert result.stderr == "probe-script: warning: clocks left as they are\nprobe-script: error: no GPUs\n"


def test_a_script_without_the_sh_suffix_keeps_its_whole_name(tmp_path):
    result = run(tmp_path, 'log "ready"', name="probe")

    assert result.stdout == "probe: ready\n"


def test_die_stops_the_script_with_exit_status_1(tmp_path):
    result = run(tmp_path, 'die "nvidia-smi lists 7 GPUs, expected 8"; echo "not reached"')

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "probe-script: error: nvidia-smi lists 7 GPUs, expected 8\n"


def test_a_script_sets_its_own_error_status(tmp_path):
    result = run(tmp_path, 'ERROR_STATUS=2\nrequire_settings "see its header" GPUFLEET_HOSTFILE\ndie "not reached"')

    assert result.returncode == 2
    assert result.stderr == "probe-script: error: GPUFLEET_HOSTFILE is not set (see its header)\n"


def test_settings_that_are_all_there_pass(tmp_path):
    result = run(
        tmp_path,
        'require_settings "$NODE_SETTINGS" GPUFLEET_GPU_COUNT GPUFLEET_EFA; log "checked"',
        GPUFLEET_GPU_COUNT="8",
        GPUFLEET_EFA="0",
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, "probe-script: checked\n", "")


def test_every_missing_or_empty_setting_is_named_on_its_own_line_then_the_script_stops(tmp_path):
    result = run(
        tmp_path,
        'require_settings "$NODE_SETTINGS" GPUFLEET_GPU_COUNT GPUFLEET_EFA GPUFLEET_NVME_COUNT GPUFLEET_SCRATCH_MOUNT\n'
        'echo "not reached"',
        GPUFLEET_EFA="",
        GPUFLEET_NVME_COUNT="8",
    )

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "probe-script: error: GPUFLEET_GPU_COUNT is not set (from /etc/gpufleet/node.env)",
        "probe-script: error: GPUFLEET_EFA is not set (from /etc/gpufleet/node.env)",
        "probe-script: error: GPUFLEET_SCRATCH_MOUNT is not set (from /etc/gpufleet/node.env)",
    ]


def test_the_pipeline_settings_name_where_a_build_gets_them(tmp_path):
    result = run(tmp_path, 'require_settings "$PIPELINE_SETTINGS" GPUFLEET_AMI_PROFILE')

    assert result.stderr == (
        "probe-script: error: GPUFLEET_AMI_PROFILE is not set (set by the AMI pipeline's CodeBuild project, or by "
        "start-build --environment-variables-override)\n"
    )
