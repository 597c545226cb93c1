"""gpufleet summary on a cloud assembly with one damaged file (the manifest or a cluster template): exit 0 or 1,
every stderr line naming the assembly. In the cdk-synth group (tests/worker_groups.py): it damages a synthesis."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.inputs import damaged_json, fuzz_settings, run_command

EXIT_CODES = {0, 1}


@pytest.fixture(scope="module")
def assembly_files(assembly) -> dict[str, bytes]:
    """The files summary reads: the manifest and every cluster stack's template."""
    names = ["manifest.json"] + [
        assembly.template_file(stack).name
        for stack in assembly.stack_names
        if stack.endswith(("-cluster", "-gpu-nodes"))
    ]
    return {name: (assembly.directory / name).read_bytes() for name in names}


@fuzz_settings(examples=40)
@given(choice=st.data())
def test_one_damaged_file(tmp_path, assembly_files, choice):
    cdk_out = tmp_path / "cdk.out"
    shutil.rmtree(cdk_out, ignore_errors=True)
    cdk_out.mkdir()
    for name, data in assembly_files.items():
        (cdk_out / name).write_bytes(data)
    name = choice.draw(st.sampled_from(sorted(assembly_files)))
    data = choice.draw(damaged_json([assembly_files[name]]))
    (cdk_out / name).write_bytes(data)
    run_command(["summary", str(cdk_out)], exit_codes=EXIT_CODES, names=(str(cdk_out),), input_bytes=len(data))
