"""raid0-nvme.sh on a fake node (fake_commands.py models the drives, md arrays, udev and mounts) in every state a
launch, a reboot or a stop/start leaves the instance-store drives in."""

import stat
from pathlib import Path

import pytest

EBS_ROOT = ["nvme0n1", "Amazon Elastic Block Store"]
ARRAY = "/dev/md/scratch"
MEMBERS = [f"/dev/nvme{i}n1" for i in range(1, 9)]
CREATE = ["--create", ARRAY, "--run", "--homehost=any", "--level=0", "--raid-devices=8", *MEMBERS]
# -K: no discard of the (already trimmed) drives; -l su=8b: a 32 KiB log stripe unit instead of the array's 512 KiB.
ARRAY_MKFS = ["-q", "-K", "-l", "su=8b", ARRAY]
NODE_SETTINGS = Path(__file__).resolve().parents[3] / "docs" / "reference" / "node-settings.md"


def drives(count: int) -> list[list[str]]:
    return [[f"nvme{i}n1", "Amazon EC2 NVMe Instance Storage"] for i in range(1, count + 1)]


@pytest.fixture
def settings(tmp_path):
    return {"GPUFLEET_RAID0_NVME": "1", "GPUFLEET_SCRATCH_MOUNT": str(tmp_path / "scratch"), "GPUFLEET_NVME_COUNT": "8"}


@pytest.fixture
def set_up_node(node, settings):
    """A node that has run the script once on its fresh drives: an array with XFS on it, mounted."""
    node.set_state(drives=[EBS_ROOT, *drives(8)])
    node.run("raid0-nvme.sh", **settings)
    node.clear_log()
    return node


def reboot(node, udev_names: list[str] | None) -> None:
    """The node after a reboot: the drives keep their data and nothing is mounted. udev_names: the /dev/md/ links
    of the array udev assembled from the drives at boot, before the setup unit ran (None: udev assembled nothing,
    e.g. auto-assembly is off)."""
    state = node.state
    arrays = {}
    if udev_names is not None:
        uuid = state["superblocks"][MEMBERS[0]]["uuid"]
        arrays = {"md127": {"uuid": uuid, "names": udev_names, "members": MEMBERS, "state": "clean"}}
    node.set_state(**{**state, "arrays": arrays, "mounts": {}})


def test_fresh_drives_become_one_array_over_every_instance_store_drive_never_the_ebs_root(node, settings):
    node.set_state(drives=[EBS_ROOT, *drives(8)])

    node.run("raid0-nvme.sh", **settings)

    assert node.calls("mdadm") == [["--examine", *MEMBERS], CREATE]
    assert node.calls("mkfs.xfs") == [ARRAY_MKFS]
    assert node.calls("mount") == [["-o", "noatime", ARRAY, settings["GPUFLEET_SCRATCH_MOUNT"]]]
    assert not any("/dev/nvme0n1" in call for call in node.calls())
    assert node.state["superblocks"]["/dev/nvme1n1"]["name"] == "any:scratch"


def test_second_run_is_a_no_op(set_up_node, settings):
    result = set_up_node.run("raid0-nvme.sh", **settings)

    assert [call[0] for call in set_up_node.calls()] == ["mountpoint"]
    assert "already mounted" in result.stdout


@pytest.mark.parametrize(
    "udev_names",
    [[ARRAY], ["/dev/md/scratch_0"], []],
    ids=["as-/dev/md/scratch", "with-host-suffix", "only-/dev/md127"],
)
def test_after_a_reboot_the_array_udev_assembled_is_mounted_whatever_its_name(set_up_node, settings, udev_names):
    reboot(set_up_node, udev_names)

    result = set_up_node.run("raid0-nvme.sh", **settings)

    assert set_up_node.calls("mdadm") == []
    assert set_up_node.calls("mkfs.xfs") == []
    assert set_up_node.state["mounts"] == {settings["GPUFLEET_SCRATCH_MOUNT"]: "/dev/md127"}
    assert "/dev/md127 is already assembled" in result.stdout


def test_after_a_reboot_without_auto_assembly_the_array_is_assembled_and_mounted_without_formatting(
    set_up_node, settings
):
    reboot(set_up_node, udev_names=None)

    set_up_node.run("raid0-nvme.sh", **settings)

    assert set_up_node.calls("mdadm") == [["--examine", *MEMBERS], ["--assemble", ARRAY, *MEMBERS]]
    assert set_up_node.calls("mkfs.xfs") == []
    assert set_up_node.state["mounts"] == {settings["GPUFLEET_SCRATCH_MOUNT"]: ARRAY}


def test_an_inactive_array_udev_left_holding_some_drives_is_stopped_and_the_array_assembled(set_up_node, settings):
    reboot(set_up_node, udev_names=None)
    state = set_up_node.state
    uuid = state["superblocks"]["/dev/nvme1n1"]["uuid"]
    inactive = {"uuid": uuid, "names": ["/dev/md/scratch_0"], "members": MEMBERS[:7], "state": "inactive"}
    set_up_node.set_state(**{**state, "arrays": {"md127": inactive}})

    set_up_node.run("raid0-nvme.sh", **settings)

    assert set_up_node.calls("mdadm") == [
        ["--stop", "/dev/md127"],
        ["--examine", *MEMBERS],
        ["--assemble", ARRAY, *MEMBERS],
    ]
    assert set_up_node.calls("mkfs.xfs") == []
    assert set_up_node.state["mounts"] == {settings["GPUFLEET_SCRATCH_MOUNT"]: ARRAY}


def test_a_drive_probed_late_is_waited_for_while_udev_finishes_the_array(set_up_node, settings):
    reboot(set_up_node, udev_names=None)
    state = set_up_node.state
    # nvme8n1 shows up only after the first look; udev has put the other seven into an array it cannot start yet.
    uuid = state["superblocks"][MEMBERS[0]]["uuid"]
    waiting = {"uuid": uuid, "names": [], "members": MEMBERS[:7], "state": "inactive"}
    set_up_node.set_state(
        **{**state, "drives": state["drives"][:-1], "late_drives": state["drives"][-1:], "arrays": {"md127": waiting}}
    )

    result = set_up_node.run("raid0-nvme.sh", **settings)

    assert "found 7 of 8 instance-store drives; waiting" in result.stdout
    assert set_up_node.calls("udevadm") == [["settle"], ["settle"]]
    assert set_up_node.calls("mdadm") == []
    assert set_up_node.state["mounts"] == {settings["GPUFLEET_SCRATCH_MOUNT"]: "/dev/md127"}


def test_after_a_stop_start_the_blank_drives_get_a_new_array(set_up_node, settings):
    set_up_node.set_state(drives=set_up_node.state["drives"])  # instance store comes back empty

    set_up_node.run("raid0-nvme.sh", **settings)

    assert set_up_node.calls("mdadm") == [["--examine", *MEMBERS], CREATE]
    assert set_up_node.calls("mkfs.xfs") == [ARRAY_MKFS]
    assert set_up_node.state["mounts"] == {settings["GPUFLEET_SCRATCH_MOUNT"]: ARRAY}


def test_a_running_array_over_only_some_of_the_drives_is_left_alone(node, settings):
    superblock = {"uuid": "other", "name": "any:other", "raid_devices": 4}
    node.set_state(
        drives=drives(8),
        superblocks={member: superblock for member in MEMBERS[:4]},
        arrays={"md127": {"uuid": "other", "names": [], "members": MEMBERS[:4], "state": "clean"}},
    )

    result = node.run("raid0-nvme.sh", check=False, **settings)

    assert result.returncode == 1
    assert "/dev/md127 (clean) holds 4 of the 8 instance-store drives; not touching them" in result.stderr
    assert node.calls("mdadm") == [] and node.calls("mkfs.xfs") == []


def test_single_drive_is_formatted_without_raid(node, settings):
    node.set_state(drives=[EBS_ROOT, *drives(1)])

    node.run("raid0-nvme.sh", **{**settings, "GPUFLEET_NVME_COUNT": "1"})

    assert node.calls("mdadm") == []
    assert node.calls("mkfs.xfs") == [["-q", "-K", "/dev/nvme1n1"]]
    assert node.calls("mount") == [["-o", "noatime", "/dev/nvme1n1", settings["GPUFLEET_SCRATCH_MOUNT"]]]


def test_no_drives_is_reported_and_succeeds(node, settings):
    node.set_state(drives=[EBS_ROOT])

    result = node.run("raid0-nvme.sh", **settings, GPUFLEET_NVME_WAIT_SECONDS="0")

    assert "no NVMe instance-store drives found" in result.stdout
    assert [call[0] for call in node.calls()] == ["mountpoint", "udevadm", "lsblk"]


def test_fewer_drives_than_the_instance_type_has_is_an_error_once_the_wait_is_over(node, settings):
    node.set_state(drives=drives(7))

    result = node.run("raid0-nvme.sh", check=False, **settings, GPUFLEET_NVME_WAIT_SECONDS="1")

    assert result.returncode == 1
    assert "found 7 instance-store drives" in result.stderr and "expected 8" in result.stderr
    assert node.calls("mdadm") == []


def test_other_filesystem_is_never_reformatted(node, settings):
    node.set_state(drives=drives(1), filesystems={"/dev/nvme1n1": "ext4"})

    result = node.run("raid0-nvme.sh", check=False, **{**settings, "GPUFLEET_NVME_COUNT": "1"})

    assert result.returncode == 1
    assert "already has a filesystem of type ext4" in result.stderr
    assert node.calls("mkfs.xfs") == []


def test_the_scratch_volume_is_made_and_mounted_as_the_docs_say(node, settings):
    raid_row = next(line for line in NODE_SETTINGS.read_text().splitlines() if line.startswith("| `raid0-nvme.sh`"))
    assert "`mkfs.xfs -K -l su=8b`" in raid_row
    assert "mounted with `noatime`" in raid_row and "mode `1777`" in raid_row
    node.set_state(drives=drives(8))

    node.run("raid0-nvme.sh", **settings)

    assert node.calls("mkfs.xfs") == [["-q", "-K", "-l", "su=8b", ARRAY]]
    assert node.calls("mount") == [["-o", "noatime", ARRAY, settings["GPUFLEET_SCRATCH_MOUNT"]]]
    assert stat.S_IMODE(Path(settings["GPUFLEET_SCRATCH_MOUNT"]).stat().st_mode) == 0o1777


def test_disabled_does_nothing(node, settings):
    result = node.run("raid0-nvme.sh", **{**settings, "GPUFLEET_RAID0_NVME": "0"})

    assert "disabled" in result.stdout
    assert node.calls() == []


@pytest.mark.parametrize("missing", ["GPUFLEET_RAID0_NVME", "GPUFLEET_SCRATCH_MOUNT", "GPUFLEET_NVME_COUNT"])
def test_missing_setting_is_a_clear_error(node, settings, missing):
    node.set_state(drives=drives(8))
    del settings[missing]

    result = node.run("raid0-nvme.sh", check=False, **settings)

    assert result.returncode == 1
    assert result.stderr == f"raid0-nvme: error: {missing} is not set (from /etc/gpufleet/node.env)\n"
    assert node.calls("mdadm") == []


def test_a_wait_that_is_not_a_number_is_a_clear_error(node, settings):
    result = node.run("raid0-nvme.sh", check=False, **settings, GPUFLEET_NVME_WAIT_SECONDS="30s")

    assert result.returncode == 1
    assert "GPUFLEET_NVME_WAIT_SECONDS must be a number of seconds, got '30s'" in result.stderr
