"""The configuration files, damaged: environment files (gpufleet validate), the AMI pipeline file (validate reads it
for every environment) and AMI profiles (gpufleet ami check). Each answers 0 or 1, every stderr line naming a file."""

from __future__ import annotations

from hypothesis import given

from gpufleet.ami import AMI_DIR, PROFILES_DIR
from tests.conftest import REPOSITORY
from tests.fuzz.inputs import damaged, fuzz_settings, run_command

ENVIRONMENTS = sorted((REPOSITORY / "environments").glob("*.yaml"))
PROFILES = sorted(PROFILES_DIR.glob("*.yaml"))
EXIT_CODES = {0, 1}


@fuzz_settings(examples=60)
@given(data=damaged(path.read_bytes() for path in ENVIRONMENTS))
def test_damaged_environment_files(tmp_path, data):
    path = tmp_path / "dev.yaml"
    path.write_bytes(data)
    run_command(["validate", str(path)], exit_codes=EXIT_CODES, names=(str(path),), input_bytes=len(data))


@fuzz_settings(examples=40)
@given(data=damaged([(AMI_DIR / "pipeline.yaml").read_bytes()]))
def test_damaged_pipeline_file(tmp_path, monkeypatch, data):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_bytes(data)
    monkeypatch.setenv("GPUFLEET_AMI_PIPELINE_FILE", str(pipeline))
    environment = str(REPOSITORY / "environments" / "dev.yaml")
    run_command(
        ["validate", environment], exit_codes=EXIT_CODES, names=(str(pipeline), environment), input_bytes=len(data)
    )


@fuzz_settings(examples=60)
@given(data=damaged(path.read_bytes() for path in PROFILES))
def test_damaged_ami_profiles(tmp_path, data):
    # Named as one shipped profile, so that a third of the damaged copies pass the name check and go deeper.
    path = tmp_path / "ubuntu2204-cuda12.yaml"
    path.write_bytes(data)
    run_command(["ami", "check", str(path)], exit_codes=EXIT_CODES, names=(str(path),), input_bytes=len(data))
