"""gpu-clocks.sh against a fake nvidia-smi: supported clocks of an A100, drivers with and without -ac / -lgc, and
Hopper GPUs that refuse -lmc."""

import pytest

# As an A100 SXM4 40 GB lists them: one memory clock, graphics clocks from 1410 down to 210 MHz in 15 MHz steps.
A100_SUPPORTED_CLOCKS = "".join(f"1215, {graphics}\n" for graphics in range(1410, 209, -15))
# A GPU with two memory clocks: the highest graphics clock (2000) is only offered at the lower memory clock.
TWO_MEMORY_CLOCKS = "5001, 1590\n5001, 1500\n810, 2000\n405, 2100\n"
SETTINGS = {"GPUFLEET_MAX_CLOCKS": "1", "GPUFLEET_GPU_COUNT": "8", "GPUFLEET_GPU_COMPUTE_CAPABILITY": "8.0"}
HOPPER = {**SETTINGS, "GPUFLEET_GPU_COMPUTE_CAPABILITY": "9.0"}
# A driver after -ac was removed (the manual: "deprecated and will be removed in a future CUDA release").
WITHOUT_AC = ["-pm", "-lgc", "-lmc", "-lmcd"]
# A driver from before -lgc: application clocks only.
AC_ONLY = ["-pm", "-ac"]


def gpus(count: int, architecture: str = "ampere") -> list[dict]:
    return [
        {"architecture": architecture, "mig_current": "Disabled", "mig_pending": "Disabled", "profiles": {}}
        for _ in range(count)
    ]


def settings_made(node) -> list[list[str]]:
    return [call for call in node.calls("nvidia-smi") if not call[0].startswith("--query")]


@pytest.mark.parametrize("driver_options", [WITHOUT_AC, WITHOUT_AC + ["-ac"]], ids=["driver-without-ac", "with-ac"])
def test_a100_locks_the_highest_graphics_clock_with_lgc_and_never_uses_ac(node, driver_options):
    assert A100_SUPPORTED_CLOCKS.count("\n") == 81
    node.set_state(gpus=gpus(8), supported_clocks=A100_SUPPORTED_CLOCKS, driver_options=driver_options)

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert settings_made(node) == [["-pm", "1"], ["-lgc", "1410,1410"]]
    assert node.state["locked_graphics_clocks"] == "1410,1410"
    assert "graphics clock locked at 1410 MHz on 8 GPUs" in result.stdout
    assert "the GPUs have one (1215 MHz), nothing to lock" in result.stdout
    assert result.stderr == ""


def test_two_memory_clocks_locks_the_highest_memory_clock_with_lmc(node):
    node.set_state(gpus=gpus(8), supported_clocks=TWO_MEMORY_CLOCKS, driver_options=WITHOUT_AC)

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert settings_made(node) == [["-pm", "1"], ["-lgc", "1590,1590"], ["-lmc", "5001,5001"]]
    assert "memory clock locked at 5001 MHz on 8 GPUs" in result.stdout


def test_hopper_locks_memory_deferred(node):
    node.set_state(gpus=gpus(8, "hopper"), supported_clocks=TWO_MEMORY_CLOCKS, driver_options=WITHOUT_AC)

    result = node.run("gpu-clocks.sh", **HOPPER)

    assert settings_made(node) == [["-pm", "1"], ["-lgc", "1590,1590"], ["-lmcd", "5001"]]
    assert node.state["deferred_memory_clock"] == "5001"
    assert "it takes effect when the GPUs are next initialized (next boot)" in result.stdout


def test_memory_clock_refused_with_exit_0_is_a_warning(node):
    # A Hopper GPU with the Ampere form: nvidia-smi says "not supported" per GPU and exits 0.
    node.set_state(gpus=gpus(8, "hopper"), supported_clocks=TWO_MEMORY_CLOCKS)

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert result.returncode == 0
    assert "Setting locked Memory clocks is not supported for GPU 00000000:10:1C.0." in result.stdout
    assert "gpu-clocks: warning: memory clock not locked (nvidia-smi -lmc 5001,5001 failed)" in result.stderr
    assert "locked_memory_clocks" not in node.state


def test_a_driver_without_lgc_gets_application_clocks(node):
    node.set_state(gpus=gpus(8), supported_clocks=A100_SUPPORTED_CLOCKS, driver_options=AC_ONLY)

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert settings_made(node) == [["-pm", "1"], ["-lgc", "1410,1410"], ["-ac", "1215,1410"]]
    assert "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." in result.stdout
    assert "application clocks set to 1215 MHz memory, 1410 MHz graphics on 8 GPUs" in result.stdout
    assert node.state["applications_clocks"] == "1215,1410"


def test_clocks_nvidia_smi_refuses_do_not_fail_the_setup(node):
    node.set_state(gpus=gpus(8), supported_clocks=A100_SUPPORTED_CLOCKS, driver_options=[])

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert result.returncode == 0
    assert result.stdout.count("Invalid combination of input arguments") == 3
    assert result.stderr == (
        "gpu-clocks: warning: persistence mode is not on (nvidia-smi -pm 1 failed)\n"
        "gpu-clocks: warning: clocks left as they are: nvidia-smi accepted neither -lgc 1410,1410 nor -ac 1215,1410"
        " (its output is above)\n"
    )


def test_gpus_without_clock_control_are_left_alone(node):
    node.set_state(gpus=gpus(8), supported_clocks="[N/A], [N/A]\n")

    result = node.run("gpu-clocks.sh", **SETTINGS)

    assert settings_made(node) == [["-pm", "1"]]
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
