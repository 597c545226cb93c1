"""gpu-clocks.sh against a fake nvidia-smi that lists an A100's supported application clocks."""

import pytest

# As an A100 SXM4 40 GB lists them: one memory clock, graphics clocks from 1410 down to 210 MHz in 15 MHz steps.
A100_SUPPORTED_CLOCKS = "".join(f"1215, {graphics}\n" for graphics in range(1410, 209, -15))
# A GPU with two memory clocks: the highest graphics clock (2000) is only offered at the lower memory clock.
TWO_MEMORY_CLOCKS = "5001, 1590\n5001, 1500\n810, 2000\n405, 2100\n"
SETTINGS = {"GPUFLEET_MAX_CLOCKS": "1", "GPUFLEET_GPU_COUNT": "8"}


def gpus(count: int) -> list[dict]:
    return [{"mig_current": "Disabled", "mig_pending": "Disabled", "profiles": {}} for _ in range(count)]


@pytest.mark.parametrize(
    ("supported", "expected"),
    [(A100_SUPPORTED_CLOCKS, "1215,1410"), (TWO_MEMORY_CLOCKS, "5001,1590")],
    ids=["a100", "highest-memory-clock-first"],
)
def test_sets_persistence_mode_and_the_highest_supported_clocks(node, supported, expected):
    assert A100_SUPPORTED_CLOCKS.count("\n") == 81
    node.set_state(gpus=gpus(8), supported_clocks=supported)

    result = node.run("gpu-clocks.sh", **SETTINGS)

    calls = node.calls("nvidia-smi")
    assert ["-pm", "1"] in calls
    assert calls[-1] == ["-ac", expected]
    assert f"{expected.split(',')[0]} MHz memory, {expected.split(',')[1]} MHz graphics on 8 GPUs" in result.stdout


def test_gpus_without_application_clocks_are_left_alone(node):
    node.set_state(gpus=gpus(8), supported_clocks="[N/A], [N/A]\n")

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert not any(call[0] == "-ac" for call in node.calls("nvidia-smi"))
    assert "leaving the clocks as they are" in result.stdout


def test_a_missing_gpu_is_an_error(node):
    node.set_state(gpus=gpus(7), supported_clocks=A100_SUPPORTED_CLOCKS)

    result = node.run("gpu-clocks.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert "nvidia-smi lists 7 GPUs, expected 8" in result.stderr


def test_disabled_does_nothing(node):
    result = node.run("gpu-clocks.sh", **{**SETTINGS, "GPUFLEET_MAX_CLOCKS": "0"})

    assert "disabled" in result.stdout
    assert node.calls() == []
