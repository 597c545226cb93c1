"""gpufleet plan with one damaged file: a template or the manifest of --cdk-out, or an --against template given as
STACK=FILE or in a directory. Offline: with --against plan reads nothing from AWS (a socket guard holds it to that).
Exit 0, 1, 3 or 4, every stderr line naming the damaged file or, for exit 3 and 4, the environment. Plan reads
cdk.json only to synthesize, which takes seconds an example cannot: tests/gpufleet/ops/test_plan.py has its damaged
cdk.json cases. In the cdk-synth group (tests/worker_groups.py): it damages a synthesis."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPOSITORY
from tests.fuzz.inputs import damaged_json, fuzz_settings, run_command

# A Spot Fleet environment and an Auto Scaling group one (a Capacity Block's): plan judges the two apart.
ENVIRONMENTS = ("dev", "p5-block")
EXIT_CODES = {0, 1, 3, 4}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"plan --against tried to open a network connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("GPUFLEET_ENVIRONMENTS_DIR", str(REPOSITORY / "environments"))


@pytest.fixture(scope="module")
def assembly_files(assembly) -> dict[str, dict[str, bytes]]:
    """By environment, the files plan reads of the synthesis: the manifest and the environment's templates."""
    manifest = (assembly.directory / "manifest.json").read_bytes()
    return {
        env: {"manifest.json": manifest}
        | {
            assembly.template_file(stack).name: assembly.template_file(stack).read_bytes()
            for stack in assembly.stack_names
            if stack.startswith(f"gpufleet-{env}-")
        }
        for env in ENVIRONMENTS
    }


def write_files(directory: Path, files: dict[str, bytes]) -> Path:
    shutil.rmtree(directory, ignore_errors=True)  # the directory of the example before
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return directory


@fuzz_settings(examples=40)
@given(choice=st.data())
def test_one_damaged_file_of_cdk_out(tmp_path, assembly_files, choice):
    env = choice.draw(st.sampled_from(ENVIRONMENTS))
    files = assembly_files[env]
    saved = write_files(tmp_path / "saved", files)
    name = choice.draw(st.sampled_from(sorted(files)))
    data = choice.draw(damaged_json([files[name]]))
    cdk_out = write_files(tmp_path / "cdk.out", files | {name: data})
    run_command(
        ["plan", env, "--cdk-out", str(cdk_out), "--against", str(saved)],
        exit_codes=EXIT_CODES,
        names=(str(cdk_out), f"{env}: "),
        input_bytes=len(data),
    )


@fuzz_settings(examples=40)
@given(choice=st.data())
def test_one_damaged_against_template(tmp_path, assembly_files, choice):
    env = choice.draw(st.sampled_from(ENVIRONMENTS))
    files = assembly_files[env]
    cdk_out = write_files(tmp_path / "cdk.out", files)
    templates = sorted(name for name in files if name != "manifest.json")
    name = choice.draw(st.sampled_from(templates))
    data = choice.draw(damaged_json([files[name]]))
    saved = write_files(tmp_path / "saved", {template: files[template] for template in templates} | {name: data})
    if choice.draw(st.booleans(), label="as STACK=FILE"):
        against = [f"--against={template.removesuffix('.template.json')}={saved / template}" for template in templates]
    else:
        against = [f"--against={saved}"]
    run_command(
        ["plan", env, "--cdk-out", str(cdk_out), *against],
        exit_codes=EXIT_CODES,
        names=(str(saved / name), f"{env}: "),
        input_bytes=len(data),
    )
