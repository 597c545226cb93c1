"""mig.sh against a fake nvidia-smi with A100 40 GB MIG profiles."""

SETTINGS = {"GPUFLEET_MIG_PROFILE": "3g.20gb", "GPUFLEET_GPU_COUNT": "2"}


def a100(mode: str = "Disabled", free_3g: int = 2) -> dict:
    return {
        "mig_current": mode,
        "mig_pending": mode,
        "profiles": {"1g.5gb+me": [20, 1, 1], "1g.5gb": [19, 7, 7], "3g.20gb": [9, free_3g, 2], "7g.40gb": [0, 1, 1]},
    }


def test_enables_mig_resets_and_creates_as_many_instances_as_fit(node):
    node.set_state(gpus=[a100(), a100()])

    node.run("mig.sh", **SETTINGS)

    calls = node.calls("nvidia-smi")
    for index in ("0", "1"):
        assert ["-i", index, "-mig", "1"] in calls
        assert ["-r", "-i", index] in calls
        assert ["mig", "-i", index, "-cgi", "9,9", "-C"] in calls
    assert [gpu["mig_current"] for gpu in node.state["gpus"]] == ["Enabled", "Enabled"]


def test_already_applied_is_a_no_op(node):
    node.set_state(gpus=[a100("Enabled", free_3g=0), a100("Enabled", free_3g=0)])

    result = node.run("mig.sh", **SETTINGS)

    changes = [call for call in node.calls("nvidia-smi") if "-cgi" in call or "-mig" in call or "-r" in call]
    assert changes == []
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


def test_no_profile_means_disabled(node):
    result = node.run("mig.sh", **{**SETTINGS, "GPUFLEET_MIG_PROFILE": ""})

    assert "disabled" in result.stdout
    assert node.calls() == []
