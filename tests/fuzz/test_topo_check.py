"""gpufleet topo-check on damaged nvidia-smi topo -m captures: exit 0, 1 or 2, every stderr line naming the file."""

from __future__ import annotations

import json

from hypothesis import given

from tests.conftest import FIXTURES
from tests.fuzz.inputs import damaged, fuzz_settings, run_command

CAPTURES = sorted((FIXTURES / "topo").glob("*.txt"))
EXIT_CODES = {0, 1, 2}


@fuzz_settings(examples=100)
@given(data=damaged(capture.read_bytes() for capture in CAPTURES))
def test_damaged_captures(tmp_path, data):
    path = tmp_path / "topo.txt"
    path.write_bytes(data)
    code, out, _ = run_command(
        ["topo-check", str(path), "--instance-type", "p4d.24xlarge", "--json"],
        exit_codes=EXIT_CODES,
        names=(str(path),),
        input_bytes=len(data),
    )
    if code != 2:
        assert json.loads(out)["ok"] == (code == 0)


@fuzz_settings(examples=30)
@given(data=damaged(capture.read_bytes() for capture in CAPTURES))
def test_damaged_captures_on_stdin(data):
    run_command(
        ["topo-check", "--instance-type", "p5.48xlarge"],
        exit_codes=EXIT_CODES,
        names=("<stdin>",),
        input_bytes=len(data),
        stdin=data,
    )


def test_a_whole_matrix_of_many_gpus_is_checked_in_time(tmp_path):
    # 500 GPUs, every pair NVLinked: 124,750 pairs from a file just under the 1 MiB limit.
    gpus = [f"GPU{i}" for i in range(500)]
    rows = ["\t" + "\t".join(gpus)]
    rows += [f"{gpu}\t" + "\t".join("X" if i == j else "NV1" for j in range(500)) for i, gpu in enumerate(gpus)]
    path = tmp_path / "topo.txt"
    path.write_text("\n".join(rows) + "\n")
    size = path.stat().st_size
    assert size < 1 << 20
    code, out, _ = run_command(
        ["topo-check", str(path), "--instance-type", "p4d.24xlarge"],
        exit_codes={1},
        names=(str(path),),
        input_bytes=size,
    )
    assert out.splitlines()[0] == f"{path}: 500 GPUs (8 expected for p4d.24xlarge)"
