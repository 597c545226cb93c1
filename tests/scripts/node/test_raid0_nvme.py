"""raid0-nvme.sh against fake lsblk/mdadm/blkid/mkfs.xfs/mount: create, re-run, reboot, stop/start."""

import pytest

EBS_ROOT = ["nvme0n1", "Amazon Elastic Block Store"]
ARRAY = "/dev/md/scratch"


def drives(count: int) -> list[list[str]]:
    return [[f"nvme{i}n1", "Amazon EC2 NVMe Instance Storage"] for i in range(1, count + 1)]


@pytest.fixture
def settings(tmp_path):
    return {"GPUFLEET_RAID0_NVME": "1", "GPUFLEET_SCRATCH_MOUNT": str(tmp_path / "scratch"), "GPUFLEET_NVME_COUNT": "8"}


def test_creates_one_array_over_all_instance_store_drives_and_never_the_ebs_root(node, settings):
    node.set_state(drives=[EBS_ROOT, *drives(8)])
    node.run("raid0-nvme.sh", **settings)

    members = [f"/dev/nvme{i}n1" for i in range(1, 9)]
    assert node.calls("mdadm")[-1] == ["--create", ARRAY, "--run", "--level=0", "--raid-devices=8", *members]
    assert node.calls("mkfs.xfs") == [["-q", ARRAY]]
    assert node.calls("mount") == [["-o", "noatime", ARRAY, settings["GPUFLEET_SCRATCH_MOUNT"]]]
    assert not any("/dev/nvme0n1" in call for call in node.calls())


def test_second_run_is_a_no_op(node, settings):
    node.set_state(drives=[EBS_ROOT, *drives(8)])
    node.run("raid0-nvme.sh", **settings)
    node.clear_log()

    result = node.run("raid0-nvme.sh", **settings)

    assert [call[0] for call in node.calls()] == ["mountpoint"]
    assert "already mounted" in result.stdout


def test_after_a_reboot_the_array_is_assembled_and_mounted_without_formatting(node, settings):
    node.set_state(drives=drives(8))
    node.run("raid0-nvme.sh", **settings)
    state = node.state
    node.set_state(**{**state, "array_active": False, "mounts": {}})
    node.clear_log()

    node.run("raid0-nvme.sh", **settings)

    assert [call[0] for call in node.calls("mdadm")] == ["--detail", "--examine", "--assemble"]
    assert node.calls("mkfs.xfs") == []
    assert node.calls("mount") == [["-o", "noatime", ARRAY, settings["GPUFLEET_SCRATCH_MOUNT"]]]


def test_after_a_stop_start_blank_drives_get_a_new_array(node, settings):
    node.set_state(drives=drives(8))
    node.run("raid0-nvme.sh", **settings)
    node.set_state(drives=drives(8))
    node.clear_log()

    node.run("raid0-nvme.sh", **settings)

    assert [call[0] for call in node.calls("mdadm")] == ["--detail", "--examine", "--create"]
    assert node.calls("mkfs.xfs") == [["-q", ARRAY]]


def test_array_assembled_but_not_mounted_is_mounted(node, settings):
    node.set_state(drives=drives(8), array_active=True, filesystems={ARRAY: "xfs"})

    node.run("raid0-nvme.sh", **settings)

    assert [call[0] for call in node.calls("mdadm")] == ["--detail"]
    assert node.calls("mkfs.xfs") == []
    assert len(node.calls("mount")) == 1


def test_single_drive_is_formatted_without_raid(node, settings):
    node.set_state(drives=[EBS_ROOT, *drives(1)])

    node.run("raid0-nvme.sh", **{**settings, "GPUFLEET_NVME_COUNT": "1"})

    assert node.calls("mdadm") == []
    assert node.calls("mkfs.xfs") == [["-q", "/dev/nvme1n1"]]
    assert node.calls("mount") == [["-o", "noatime", "/dev/nvme1n1", settings["GPUFLEET_SCRATCH_MOUNT"]]]


def test_no_drives_is_reported_and_succeeds(node, settings):
    node.set_state(drives=[EBS_ROOT])

    result = node.run("raid0-nvme.sh", **settings)

    assert "no NVMe instance-store drives found" in result.stdout
    assert [call[0] for call in node.calls()] == ["mountpoint", "lsblk"]


def test_fewer_drives_than_the_instance_type_has_is_an_error(node, settings):
    node.set_state(drives=drives(7))

    result = node.run("raid0-nvme.sh", check=False, **settings)

    assert result.returncode == 1
    assert "found 7 instance-store drives" in result.stderr and "expected 8" in result.stderr
    assert node.calls("mdadm") == []


def test_other_filesystem_is_never_reformatted(node, settings):
    node.set_state(drives=drives(1), filesystems={"/dev/nvme1n1": "ext4"})

    result = node.run("raid0-nvme.sh", check=False, **{**settings, "GPUFLEET_NVME_COUNT": "1"})

    assert result.returncode == 1
    assert "already has a filesystem of type ext4" in result.stderr
    assert node.calls("mkfs.xfs") == []


def test_disabled_does_nothing(node, settings):
    result = node.run("raid0-nvme.sh", **{**settings, "GPUFLEET_RAID0_NVME": "0"})

    assert "disabled" in result.stdout
    assert node.calls() == []


@pytest.mark.parametrize("missing", ["GPUFLEET_RAID0_NVME", "GPUFLEET_SCRATCH_MOUNT", "GPUFLEET_NVME_COUNT"])
def test_missing_setting_is_a_clear_error(node, settings, missing):
    node.set_state(drives=drives(8))
    del settings[missing]

    result = node.run("raid0-nvme.sh", check=False, **settings)

    assert result.returncode != 0
    assert missing in result.stderr
    assert node.calls("mdadm") == []
