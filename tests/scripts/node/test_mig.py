"""mig.sh against a fake nvidia-smi with A100 40 GB (Ampere) and H100 80 GB (Hopper) MIG profiles."""

import pytest

SETTINGS = {"GPUFLEET_MIG_PROFILE": "3g.20gb", "GPUFLEET_GPU_COUNT": "2", "GPUFLEET_GPU_COMPUTE_CAPABILITY": "8.0"}
H100_SETTINGS = {**SETTINGS, "GPUFLEET_MIG_PROFILE": "3g.40gb", "GPUFLEET_GPU_COMPUTE_CAPABILITY": "9.0"}


def a100(mode: str = "Disabled", free_3g: int = 2) -> dict:
    return {
        "mig_current": mode,
        "mig_pending": mode,
        "profiles": {"1g.5gb+me": [20, 1, 1], "1g.5gb": [19, 7, 7], "3g.20gb": [9, free_3g, 2], "7g.40gb": [0, 1, 1]},
    }


def h100(mode: str = "Disabled", free_3g: int = 2) -> dict:
    return {
        "architecture": "hopper",
        "mig_current": mode,
        "mig_pending": mode,
        "profiles": {"1g.10gb": [19, 7, 7], "3g.40gb": [9, free_3g, 2], "7g.80gb": [0, 1, 1]},
    }


def reboot(node) -> None:
    """What a reboot does (MIG user guide, "Enable MIG Mode", "Creating GPU Instances"): the instances are gone; an
    Ampere GPU keeps its MIG mode (InfoROM) and a pending mode takes effect; a Hopper GPU comes back with it off."""
    state = node.state
    for gpu in state["gpus"]:
        if gpu.get("architecture") == "hopper":
            gpu["mig_current"] = gpu["mig_pending"] = "Disabled"
        else:
            gpu["mig_current"] = gpu["mig_pending"]
        for entry in gpu["profiles"].values():
            entry[1] = entry[2]
    node.set_state(**state)
    node.clear_log()


def changes(node) -> list[list[str]]:
    return [call for call in node.calls("nvidia-smi") if {"-cgi", "-mig", "-r"} & set(call)]


def test_a100_mig_mode_pending_after_enabling_is_made_effective_by_a_reset(node):
    node.set_state(gpus=[a100(), a100()])

    result = node.run("mig.sh", **SETTINGS)

    assert changes(node) == [
        ["-i", "0", "-mig", "1"],
        ["-i", "1", "-mig", "1"],
        ["-r", "-i", "0"],
        ["-r", "-i", "1"],
        ["mig", "-i", "0", "-cgi", "9,9", "-C"],
        ["mig", "-i", "1", "-cgi", "9,9", "-C"],
    ]
    assert "MIG mode is in pending enable state for GPU 00000000:10:1C.0:Not Supported" in result.stdout
    assert [gpu["mig_current"] for gpu in node.state["gpus"]] == ["Enabled", "Enabled"]


def test_a100_reset_by_the_driver_itself_needs_no_reset_from_the_script(node):
    node.set_state(gpus=[a100(), a100()], driver_resets_gpu=True)

    node.run("mig.sh", **SETTINGS)

    assert not any("-r" in call for call in node.calls("nvidia-smi"))
    assert [gpu["mig_current"] for gpu in node.state["gpus"]] == ["Enabled", "Enabled"]


def test_a100_after_a_reboot_keeps_mig_mode_and_only_recreates_the_instances(node):
    node.set_state(gpus=[a100(), a100()])
    node.run("mig.sh", **SETTINGS)
    reboot(node)

    node.run("mig.sh", **SETTINGS)

    assert changes(node) == [["mig", "-i", "0", "-cgi", "9,9", "-C"], ["mig", "-i", "1", "-cgi", "9,9", "-C"]]


def test_h100_mig_mode_takes_effect_without_a_reset(node):
    node.set_state(gpus=[h100(), h100()])

    result = node.run("mig.sh", **H100_SETTINGS)

    assert changes(node) == [
        ["-i", "0", "-mig", "1"],
        ["-i", "1", "-mig", "1"],
        ["mig", "-i", "0", "-cgi", "9,9", "-C"],
        ["mig", "-i", "1", "-cgi", "9,9", "-C"],
    ]
    assert "resetting" not in result.stdout


def test_h100_after_a_reboot_enables_mig_again_without_a_reset(node):
    node.set_state(gpus=[h100(), h100()])
    node.run("mig.sh", **H100_SETTINGS)
    reboot(node)
    assert [gpu["mig_current"] for gpu in node.state["gpus"]] == ["Disabled", "Disabled"]

    node.run("mig.sh", **H100_SETTINGS)

    enabled = [call for call in changes(node) if "-cgi" not in call]
    assert enabled == [["-i", "0", "-mig", "1"], ["-i", "1", "-mig", "1"]]
    assert [gpu["mig_current"] for gpu in node.state["gpus"]] == ["Enabled", "Enabled"]
    assert [gpu["profiles"]["3g.40gb"][1] for gpu in node.state["gpus"]] == [0, 0]


def test_h100_mig_mode_that_does_not_take_effect_is_an_error_not_a_reset(node):
    # A GPU reporting the pending state after -mig 1 although its compute capability says Hopper.
    node.set_state(gpus=[h100(), a100()])

    result = node.run("mig.sh", check=False, **H100_SETTINGS)

    assert result.returncode == 1
    assert "MIG mode did not take effect on GPUs 1 (compute capability 9.0 needs no reset" in result.stderr
    assert not any("-r" in call for call in node.calls("nvidia-smi"))


def test_already_applied_is_a_no_op(node):
    node.set_state(gpus=[a100("Enabled", free_3g=0), a100("Enabled", free_3g=0)])

    result = node.run("mig.sh", **SETTINGS)

    assert changes(node) == []
    assert result.stdout.count("already configured") == 2


def test_after_a_reboot_only_the_lost_instances_are_created(node):
    node.set_state(gpus=[a100("Enabled", free_3g=2), a100("Enabled", free_3g=0)])

    node.run("mig.sh", **SETTINGS)

    assert [call for call in node.calls("nvidia-smi") if "-cgi" in call] == [["mig", "-i", "0", "-cgi", "9,9", "-C"]]


def test_profile_name_matches_exactly(node):
    node.set_state(gpus=[a100("Enabled"), a100("Enabled")])

    node.run("mig.sh", **{**SETTINGS, "GPUFLEET_MIG_PROFILE": "1g.5gb"})

    created = [call for call in node.calls("nvidia-smi") if "-cgi" in call]
    assert created == [["mig", "-i", index, "-cgi", ",".join(["19"] * 7), "-C"] for index in ("0", "1")]


def test_gpus_in_use_are_not_reset_and_a_reboot_is_asked_for(node):
    node.set_state(gpus=[a100(), a100()], gpu_processes=[4242])

    result = node.run("mig.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert "pending enable state for GPU 00000000:10:1C.0:In use by another client" in result.stdout
    assert "1 processes use the GPUs" in result.stderr and "reboot the node" in result.stderr
    assert not any("-r" in call for call in node.calls("nvidia-smi"))


def test_failed_reset_asks_for_a_reboot(node):
    node.set_state(gpus=[a100(), a100()], reset_fails=True)

    result = node.run("mig.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert "GPU 0 reset failed: reboot the node to finish enabling MIG on GPUs 0 1" in result.stderr


def test_unknown_profile_is_an_error(node):
    node.set_state(gpus=[a100("Enabled"), a100("Enabled")])

    result = node.run("mig.sh", check=False, **{**SETTINGS, "GPUFLEET_MIG_PROFILE": "2g.20gb"})

    assert result.returncode == 1
    assert "GPU 0 does not offer MIG profile 2g.20gb" in result.stderr


def test_gpu_without_mig_is_an_error(node):
    node.set_state(gpus=[{"mig_current": "[N/A]", "mig_pending": "[N/A]", "profiles": {}}] * 2)

    result = node.run("mig.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert "GPU 0 does not support MIG" in result.stderr


@pytest.mark.parametrize("capability", ["", "9", "hopper"])
def test_compute_capability_is_required(node, capability):
    node.set_state(gpus=[a100(), a100()])

    result = node.run("mig.sh", check=False, **{**SETTINGS, "GPUFLEET_GPU_COMPUTE_CAPABILITY": capability})

    assert result.returncode == 1
    assert "GPUFLEET_GPU_COMPUTE_CAPABILITY" in result.stderr
    assert node.calls() == []


def test_no_profile_means_disabled(node):
    result = node.run("mig.sh", **{**SETTINGS, "GPUFLEET_MIG_PROFILE": ""})

    assert "disabled" in result.stdout
    assert node.calls() == []
