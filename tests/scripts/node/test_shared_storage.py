"""shared-storage.sh on a fake node: the mount source comes from the node's tag in the instance metadata (fake IMDSv2,
fake_commands.curl), the Lustre mount from the fake mount (fake_commands.mount_lustre); mounted once per boot,
left alone when there, and one error line when the file system cannot be mounted."""

from __future__ import annotations

import os

import pytest

SOURCE = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh"
TAG = "gpufleet:lustre-mount"


@pytest.fixture
def shared_dir(tmp_path):
    return tmp_path / "fsx"


@pytest.fixture
def settings(shared_dir):
    return {
        "GPUFLEET_SHARED_DIR": str(shared_dir),
        "GPUFLEET_SHARED_STORAGE_TAG": TAG,
        "GPUFLEET_IMDS_URL": "http://imds.test",
        "GPUFLEET_SHARED_MOUNT_RETRY_SECONDS": "0",
    }


def tagged_node(node, failing_mounts: int = 0, reachable: tuple[str, ...] = (SOURCE,)):
    """A node whose launch template tagged it with the file system's mount source."""
    node.set_state(
        imds={f"tags/instance/{TAG}": [[200, SOURCE]]},
        lustre={"reachable": list(reachable), "failing_mounts": failing_mounts},
    )
    return node


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("shared-storage: ")]


def test_the_file_system_of_the_node_tag_is_mounted_as_the_fsx_guide_mounts_it(node, settings, shared_dir):
    tagged_node(node)

    result = node.run("shared-storage.sh", **settings)

    assert node.calls("mount") == [["-t", "lustre", "-o", "relatime,flock,nosuid,nodev", SOURCE, str(shared_dir)]]
    assert node.state["mounts"] == {str(shared_dir): SOURCE}
    assert f"mounted {SOURCE} at {shared_dir}" in result.stdout
    # The tag is read with an IMDSv2 token.
    token_requests = [call for call in node.calls("curl") if call[-1] == "http://imds.test/latest/api/token"]
    assert len(token_requests) == 1


def test_a_new_file_system_root_becomes_writable_for_every_user(node, settings, shared_dir):
    tagged_node(node)

    node.run("shared-storage.sh", **settings)

    assert oct(shared_dir.stat().st_mode & 0o7777) == "0o1777"


def test_a_root_mode_an_administrator_chose_is_kept(node, settings, shared_dir):
    shared_dir.mkdir(mode=0o750)
    shared_dir.chmod(0o750)
    tagged_node(node)

    node.run("shared-storage.sh", **settings)

    assert oct(shared_dir.stat().st_mode & 0o7777) == "0o750"


def test_a_second_run_finds_it_mounted_and_does_nothing(node, settings):
    tagged_node(node)
    node.run("shared-storage.sh", **settings)
    node.clear_log()

    result = node.run("shared-storage.sh", **settings)

    assert [call[0] for call in node.calls()] == ["mountpoint"]
    assert "already mounted; nothing to do" in result.stdout


def test_after_a_reboot_it_is_mounted_again_once(node, settings, shared_dir):
    tagged_node(node)
    node.run("shared-storage.sh", **settings)
    node.set_state(**{**node.state, "mounts": {}})
    node.clear_log()

    node.run("shared-storage.sh", **settings)

    assert len(node.calls("mount")) == 1
    assert node.state["mounts"] == {str(shared_dir): SOURCE}


def test_a_mount_that_fails_while_the_network_comes_up_is_tried_again(node, settings, shared_dir):
    tagged_node(node, failing_mounts=2)

    result = node.run("shared-storage.sh", **settings)

    assert len(node.calls("mount")) == 3
    assert result.stdout.count("shared-storage: retrying in 0s") == 2
    assert node.state["mounts"] == {str(shared_dir): SOURCE}


def test_a_file_system_that_cannot_be_mounted_fails_with_one_line_after_three_tries(node, settings, shared_dir):
    tagged_node(node, reachable=())

    result = node.run("shared-storage.sh", check=False, **settings)

    assert result.returncode == 1
    assert len(node.calls("mount")) == 3
    assert error_lines(result) == [
        f"shared-storage: error: cannot mount {SOURCE} at {shared_dir} (is the file system available, TCP 988 and "
        "1018-1023 open?)"
    ]
    assert "mounts" not in node.state or node.state["mounts"] == {}


def test_a_node_without_the_tag_fails_with_one_line_and_mounts_nothing(node, settings):
    node.set_state(imds={}, lustre={"reachable": [SOURCE]})

    result = node.run("shared-storage.sh", check=False, **settings)

    assert result.returncode == 1
    assert error_lines(result) == [
        "shared-storage: error: instance tag gpufleet:lustre-mount holds no Lustre mount source (HTTP 404)"
    ]
    assert node.calls("mount") == []


@pytest.mark.parametrize(
    "value", ["fs-0123.fsx.us-east-1.amazonaws.com", "fs-0123@tcp:/toolongname", "x@tcp:/a; reboot"]
)
def test_a_tag_that_is_not_a_mount_source_is_refused(node, settings, value):
    node.set_state(imds={f"tags/instance/{TAG}": [[200, value]]}, lustre={"reachable": [value]})

    result = node.run("shared-storage.sh", check=False, **settings)

    assert result.returncode == 1
    assert error_lines(result) == [
        "shared-storage: error: instance tag gpufleet:lustre-mount holds no Lustre mount source (HTTP 200)"
    ]
    assert node.calls("mount") == []


def test_an_image_without_the_lustre_client_fails_with_one_line_before_asking_imds(node, settings):
    tagged_node(node)
    (node.bin_dir / "mount.lustre").unlink()

    result = node.run("shared-storage.sh", check=False, **settings)

    assert result.returncode == 1
    assert error_lines(result) == ["shared-storage: error: no Lustre client (mount.lustre) on this image"]
    assert node.calls("curl") == []


def test_a_bad_retry_setting_is_one_line(node, settings):
    result = node.run("shared-storage.sh", check=False, **{**settings, "GPUFLEET_SHARED_MOUNT_RETRY_SECONDS": "soon"})

    assert result.returncode == 1
    assert error_lines(result) == [
        "shared-storage: error: GPUFLEET_SHARED_MOUNT_RETRY_SECONDS must be a number of seconds, got 'soon'"
    ]


@pytest.mark.parametrize("mounted", [False, True])
def test_the_data_folder_of_roots_becomes_writable_for_every_user(node, settings, shared_dir, mounted):
    """MOUNT/data, the folder the data repository association links (FSx makes it, root's 755): 1777 at every boot,
    whether this run mounts the file system or finds it mounted."""
    tagged_node(node)
    data = shared_dir / "data"
    data.mkdir(parents=True)
    data.chmod(0o755)
    if mounted:
        node.set_state(mounts={str(shared_dir): SOURCE})

    result = node.run("shared-storage.sh", **settings, GPUFLEET_SHARED_DATA_DIR=str(data))

    assert oct(data.stat().st_mode & 0o7777) == "0o1777"
    assert f"shared-storage: made {data} writable by every user (1777)" in result.stdout.splitlines()


@pytest.mark.parametrize("trap", ["link", "users", "other mode"])
def test_a_data_folder_root_did_not_make_is_left_alone(node, settings, shared_dir, tmp_path, trap):
    """A link, a folder of another user's or another mode at MOUNT/data (the file system's root is every user's):
    chmod would follow the link or open another's folder to all, so nothing is changed."""
    tagged_node(node)
    shared_dir.mkdir()
    data = shared_dir / "data"
    target = tmp_path / "roots-own"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    if trap == "link":
        data.symlink_to(target)
    else:
        data.mkdir()
        data.chmod(0o700 if trap == "other mode" else 0o755)
        if trap == "users":
            os.chown(data, 2000, 2000)

    result = node.run("shared-storage.sh", **settings, GPUFLEET_SHARED_DATA_DIR=str(data))

    assert "writable by every user" not in result.stdout
    assert oct(target.stat().st_mode & 0o7777) == "0o755"
    if trap != "link":
        assert oct(data.stat().st_mode & 0o7777) == ("0o700" if trap == "other mode" else "0o755")
