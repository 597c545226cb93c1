"""The rendered user data run on a fake node: it installs the scripts and units, and the installed setup works."""

import subprocess

from gpufleet.catalog import load_catalog
from gpufleet.loading import load_named_environment
from gpufleet.user_data import render_user_data
from tests.scripts.efa_install import install_efa

HOOK = """/usr/local/bin/save-checkpoint --tag "run 42" --note 'it'"'"'s urgent'"""
A100_CLOCKS = "".join(f"1215, {graphics}\n" for graphics in range(1410, 209, -15))


def p4d_environment():
    env = load_named_environment("dev")
    node = env.node.model_copy(update={"mig_profile": "7g.40gb", "checkpoint_hook": HOOK})
    return env.model_copy(update={"node": node})


def run_user_data(node, tmp_path):
    script = tmp_path / "user-data.sh"
    script.write_text(render_user_data(p4d_environment(), load_catalog()["p4d.24xlarge"]))
    script.chmod(0o755)
    return node.run(script)


def test_user_data_installs_scripts_units_and_settings(node, tmp_path):
    run_user_data(node, tmp_path)

    installed = sorted(path.name for path in (node.root / "opt/gpufleet/node").iterdir())
    assert installed == [
        "efa-env.sh",
        "gpu-clocks.sh",
        "mig.sh",
        "raid0-nvme.sh",
        "run-setup.sh",
        "save-checkpoint.sh",
        "spot-watcher.sh",
    ]
    # The scripts source it from ../lib beside their own directory.
    assert sorted(path.name for path in (node.root / "opt/gpufleet/lib").iterdir()) == ["helpers.sh"]
    units = node.root / "etc/systemd/system"
    assert (units / "gpufleet-node-setup.service").exists() and (units / "gpufleet-spot-watcher.service").exists()
    assert "nvidia-fabricmanager.service" in (units / "gpufleet-node-setup.service.d/fabric-manager.conf").read_text()
    assert node.calls("systemctl") == [
        ["daemon-reload"],
        ["enable", "gpufleet-spot-watcher.service", "gpufleet-node-setup.service"],
        ["restart", "gpufleet-spot-watcher.service"],
        ["restart", "gpufleet-node-setup.service"],
    ]
    settings = node.root / "etc/gpufleet/node.env"
    shell = subprocess.run(
        ["bash", "-c", f'. "{settings}" && printf %s "$GPUFLEET_CHECKPOINT_HOOK"'], capture_output=True, text=True
    )
    assert shell.stdout == HOOK


def test_running_the_user_data_again_changes_nothing(node, tmp_path):
    run_user_data(node, tmp_path)
    before = {path: path.read_bytes() for path in node.root.rglob("*") if path.is_file()}

    run_user_data(node, tmp_path)

    assert {path: path.read_bytes() for path in node.root.rglob("*") if path.is_file()} == before


def test_installed_setup_runs_every_enabled_script_in_order(node, tmp_path):
    run_user_data(node, tmp_path)
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.write_text('{"components": {"aws_ofi_nccl": "1.7.3-aws"}}')
    install_efa(node.root, "ubuntu")
    node.set_state(
        drives=[[f"nvme{i}n1", "Amazon EC2 NVMe Instance Storage"] for i in range(1, 9)],
        gpus=[{"mig_current": "Disabled", "mig_pending": "Disabled", "profiles": {"7g.40gb": [0, 1, 1]}}] * 8,
        supported_clocks=A100_CLOCKS,
    )
    node.clear_log()
    scratch = tmp_path / "scratch"
    # As gpufleet-node-setup.service starts it: settings from node.env (the scratch mount moved into tmp_path).
    setup = subprocess.run(
        [
            "bash",
            "-c",
            f'. "{node.root}/etc/gpufleet/node.env" && GPUFLEET_SCRATCH_MOUNT={scratch} '
            f'exec "{node.root}/opt/gpufleet/node/run-setup.sh"',
        ],
        env={
            "PATH": f"{node.bin_dir}:/usr/bin:/bin",
            "GPUFLEET_ROOT": str(node.root),
            "FAKE_STATE": str(node.state_file),
            "FAKE_LOG": str(node.log_file),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert setup.returncode == 0, setup.stderr
    ran = [line.split("running ")[1] for line in setup.stdout.splitlines() if line.startswith("run-setup: running")]
    # MIG first: enabling it resets the A100s, which would drop clocks locked before.
    assert ran == ["raid0-nvme", "mig", "gpu-clocks", "efa-env"]
    assert node.state["mounts"] == {str(scratch): "/dev/md/scratch"}
    assert ["-lgc", "1410,1410"] in node.calls("nvidia-smi")
    assert node.state["locked_graphics_clocks"] == "1410,1410"
    assert all(gpu["profiles"]["7g.40gb"][1] == 0 for gpu in node.state["gpus"])
    assert "GPUFLEET_EFA_LIBRARY_PATH=" in (node.root / "etc/gpufleet/efa.env").read_text()


def test_a_failing_setup_script_does_not_stop_the_others(node, tmp_path):
    run_user_data(node, tmp_path)
    node.set_state(drives=[], gpus=[], supported_clocks="")

    setup = node.run(
        node.root / "opt/gpufleet/node/run-setup.sh",
        check=False,
        GPUFLEET_SETUP_SCRIPTS="gpu-clocks efa-env",
        GPUFLEET_MAX_CLOCKS="1",
        GPUFLEET_GPU_COUNT="8",
        GPUFLEET_GPU_COMPUTE_CAPABILITY="8.0",
        GPUFLEET_EFA="0",
    )

    assert setup.returncode == 1
    assert "run-setup: running efa-env" in setup.stdout
    assert "run-setup: error: failed: gpu-clocks (see the lines above)" in setup.stderr
