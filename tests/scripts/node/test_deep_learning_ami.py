"""deep-learning-ami.sh and efa-env.sh on an AWS Deep Learning AMI, which carries no gpufleet versions manifest: the
plugin found by the DLAMI's layout, its release read from the library, python.env naming the image's venv; and a
gpufleet image without its manifest still refused."""

from __future__ import annotations

import json
import shutil
import stat

import pytest

from tests.scripts.efa_install import install_efa

DLAMI = "pytorch-2.11-ubuntu-24.04"
SETTINGS = {"GPUFLEET_DEEP_LEARNING_AMI": DLAMI, "GPUFLEET_IMAGE_PYTHON_VENV": "/opt/pytorch", "GPUFLEET_EFA": "1"}
EFA_SETTINGS = {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": "1"}
# What the user data adds to a Deep Learning AMI's node.env for efa-env.sh (gpufleet/user_data.py).
ON_A_DLAMI = {"GPUFLEET_VERSIONS_MANIFEST": "/etc/gpufleet/deep-learning-ami.json"}
# Where EFA installers from 1.39 put aws-ofi-nccl on Ubuntu (as tests/scripts/ami/ model installer 1.43.2).
UBUNTU_PLUGIN = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
PYTHON_ENV = "etc/gpufleet/python.env"
VERSIONS = "etc/gpufleet/deep-learning-ami.json"


def install_plugin(node, directory: str = UBUNTU_PLUGIN, release: str | None = "1.18.0") -> None:
    """aws-ofi-nccl as the EFA installer leaves it: libnccl-net-ofi.so, whose "Initializing" message names its release
    (none before 1.10.0), and the libnccl-net.so link NCCL opens."""
    directory_path = node.root / directory.lstrip("/")
    directory_path.mkdir(parents=True)
    message = f"NET/OFI Initializing aws-ofi-nccl {release}\0" if release else "NET/OFI Initializing aws-ofi-nccl\0"
    (directory_path / "libnccl-net-ofi.so").write_bytes(b"\x7fELF\x00" + message.encode() + b"Using Libfabric\0")
    (directory_path / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")


def install_venv(node, venv: str = "/opt/pytorch") -> None:
    python = node.root / venv.lstrip("/") / "bin/python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)


@pytest.fixture
def dlami(node):
    """A node of the PyTorch DLAMI: the EFA installer's libraries and plugin, its record of its version, the venv."""
    install_efa(node.root, "ubuntu")
    install_plugin(node)
    (node.root / "opt/amazon/efa_installed_packages").write_text(
        "# EFA installer version: 1.47.0\n# Debug packages installed: no\nlibfabric-aws 2.3.0amzn1.0\n"
    )
    install_venv(node)
    return node


def versions(node) -> dict:
    return json.loads((node.root / VERSIONS).read_text())


def env_file(node) -> dict[str, str]:
    lines = (node.root / "etc/gpufleet/efa.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


def test_the_dlami_layout_is_recorded_and_its_venv_becomes_the_runs_python(dlami):
    done = dlami.run("deep-learning-ami.sh", **SETTINGS)

    assert versions(dlami) == {
        "deep_learning_ami": DLAMI,
        "components": {"aws_ofi_nccl": "1.18.0", "efa_installer": "1.47.0"},
        "paths": {"aws_ofi_nccl_lib": UBUNTU_PLUGIN},
    }
    # The contract the AMI profiles' venv follows: root's, 0644, exactly one line.
    python_env = dlami.root / PYTHON_ENV
    assert python_env.read_text() == "GPUFLEET_PYTHON_VENV=/opt/pytorch\n"
    assert stat.S_IMODE(python_env.stat().st_mode) == 0o644
    assert stat.S_IMODE((dlami.root / VERSIONS).stat().st_mode) == 0o644
    assert done.stdout == (
        f"deep-learning-ami: {DLAMI}: aws-ofi-nccl 1.18.0 in {UBUNTU_PLUGIN}; runs use /opt/pytorch\n"
    )
    assert sorted(path.name for path in (dlami.root / "etc/gpufleet").iterdir()) == [
        "deep-learning-ami.json",
        "python.env",
    ]


def test_efa_env_takes_the_plugin_the_dlami_step_found(dlami):
    dlami.run("deep-learning-ami.sh", **SETTINGS)

    dlami.run("efa-env.sh", **EFA_SETTINGS, **ON_A_DLAMI)

    # 1.18.0 needs none of the variables older plugins did; the plugin's directory ends the library path.
    assert env_file(dlami) == {
        "GPUFLEET_EFA_LIBRARY_PATH": f"/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:{UBUNTU_PLUGIN}"
    }
    header = (dlami.root / "etc/gpufleet/efa.env").read_text().splitlines()[0]
    assert header == (
        "# Written by gpufleet efa-env.sh for aws-ofi-nccl 1.18.0 (from /etc/gpufleet/deep-learning-ami.json); "
        "do not edit."
    )


@pytest.mark.parametrize(
    ("directory", "release", "expected"),
    [
        # Where images built the plugin before the EFA installer shipped it; an old release on p4d needs RDMA on.
        ("/opt/aws-ofi-nccl/lib", "1.6.4", {"FI_EFA_USE_DEVICE_RDMA": "1"}),
        ("/opt/amazon/ofi-nccl/lib64", "1.16.3-aws", {}),
        ("/opt/amazon/ofi-nccl/lib", "1.21.1", {}),
    ],
)
def test_other_plugin_layouts(node, directory, release, expected):
    install_efa(node.root, "ubuntu")
    install_plugin(node, directory, release)
    install_venv(node)

    node.run("deep-learning-ami.sh", **SETTINGS)
    node.run("efa-env.sh", **EFA_SETTINGS, **ON_A_DLAMI)

    assert versions(node)["paths"] == {"aws_ofi_nccl_lib": directory}
    # No /opt/amazon/efa_installed_packages on this image: the installer's version is left out.
    assert versions(node)["components"] == {"aws_ofi_nccl": release}
    assert env_file(node) == {
        **expected,
        "GPUFLEET_EFA_LIBRARY_PATH": f"/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:{directory}",
    }


def test_the_efa_installers_own_copy_wins_over_an_older_build(dlami):
    install_plugin(dlami, "/opt/aws-ofi-nccl/lib", "1.7.4")

    dlami.run("deep-learning-ami.sh", **SETTINGS)

    assert versions(dlami)["paths"] == {"aws_ofi_nccl_lib": UBUNTU_PLUGIN}


def test_a_missing_plugin_fails_with_efa_on(dlami):
    shutil.rmtree(dlami.root / "opt/amazon/ofi-nccl")

    done = dlami.run("deep-learning-ami.sh", check=False, **SETTINGS)

    assert done.returncode == 1
    assert done.stderr == (
        "deep-learning-ami: error: no aws-ofi-nccl (libnccl-net.so) in /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu "
        "/opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib on this pytorch-2.11-ubuntu-24.04 "
        "image: choose another ami.deep_learning_ami, or pin an image with ami.id\n"
    )
    assert not (dlami.root / PYTHON_ENV).exists()


def test_a_plugin_that_names_no_release_fails_with_efa_on(node):
    install_efa(node.root, "ubuntu")
    install_plugin(node, release=None)
    install_venv(node)

    done = node.run("deep-learning-ami.sh", check=False, **SETTINGS)

    assert done.returncode == 1
    assert done.stderr == (
        f"deep-learning-ami: error: {UBUNTU_PLUGIN}/libnccl-net.so names no aws-ofi-nccl release (releases from "
        "1.10.0 do) on this pytorch-2.11-ubuntu-24.04 image: choose another ami.deep_learning_ami, or pin an image "
        "with ami.id\n"
    )


def test_without_efa_a_missing_plugin_is_left_out(dlami):
    shutil.rmtree(dlami.root / "opt/amazon/ofi-nccl")

    dlami.run("deep-learning-ami.sh", **{**SETTINGS, "GPUFLEET_EFA": "0"})

    assert versions(dlami) == {
        "deep_learning_ami": DLAMI,
        "components": {"efa_installer": "1.47.0"},
        "paths": {},
    }
    assert (dlami.root / PYTHON_ENV).read_text() == "GPUFLEET_PYTHON_VENV=/opt/pytorch\n"


def test_a_release_without_the_venv_fails_and_leaves_no_python_env(dlami):
    (dlami.root / "etc/gpufleet").mkdir(parents=True)
    (dlami.root / PYTHON_ENV).write_text("GPUFLEET_PYTHON_VENV=/opt/pytorch\n")  # from an earlier boot
    shutil.rmtree(dlami.root / "opt/pytorch")

    done = dlami.run("deep-learning-ami.sh", check=False, **SETTINGS)

    assert done.returncode == 1
    assert done.stderr == (
        "deep-learning-ami: error: no /opt/pytorch/bin/python on this pytorch-2.11-ubuntu-24.04 image: its layout "
        "changed (choose another ami.deep_learning_ami, or pin an image with ami.id)\n"
    )
    assert not (dlami.root / PYTHON_ENV).exists()


def test_a_variant_without_a_venv_writes_no_python_env(dlami):
    (dlami.root / "etc/gpufleet").mkdir(parents=True)
    (dlami.root / PYTHON_ENV).write_text("GPUFLEET_PYTHON_VENV=/opt/pytorch\n")

    done = dlami.run("deep-learning-ami.sh", **{**SETTINGS, "GPUFLEET_IMAGE_PYTHON_VENV": ""})

    assert not (dlami.root / PYTHON_ENV).exists()
    assert done.stdout == (
        f"deep-learning-ami: {DLAMI}: aws-ofi-nccl 1.18.0; no Python venv of its own (runs use the system Python)\n"
    )


def test_a_second_boot_writes_the_same_files(dlami):
    dlami.run("deep-learning-ami.sh", **SETTINGS)
    first = {name: (dlami.root / name).read_bytes() for name in (VERSIONS, PYTHON_ENV)}

    dlami.run("deep-learning-ami.sh", **SETTINGS)

    assert {name: (dlami.root / name).read_bytes() for name in (VERSIONS, PYTHON_ENV)} == first
    assert sorted(path.name for path in (dlami.root / "etc/gpufleet").iterdir()) == [
        "deep-learning-ami.json",
        "python.env",
    ]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"GPUFLEET_DEEP_LEARNING_AMI": ""}, "GPUFLEET_DEEP_LEARNING_AMI is not set (from /etc/gpufleet/node.env)"),
        (
            {"GPUFLEET_DEEP_LEARNING_AMI": 'x", "y'},
            "GPUFLEET_DEEP_LEARNING_AMI must be a name such as pytorch-2.11-ubuntu-24.04, got 'x\", \"y'",
        ),
        (
            {"GPUFLEET_IMAGE_PYTHON_VENV": "opt/pytorch"},
            "GPUFLEET_IMAGE_PYTHON_VENV must be an absolute path, got 'opt/pytorch'",
        ),
        (
            {"GPUFLEET_IMAGE_PYTHON_VENV": "/opt/../etc"},
            "GPUFLEET_IMAGE_PYTHON_VENV must be an absolute path, got '/opt/../etc'",
        ),
    ],
)
def test_bad_settings_are_refused_one_line_each(dlami, settings, message):
    done = dlami.run("deep-learning-ami.sh", check=False, **{**SETTINGS, **settings})

    assert done.returncode == 1
    assert done.stderr == f"deep-learning-ami: error: {message}\n"
    assert not (dlami.root / "etc/gpufleet").exists()


def test_without_the_setting_efa_env_reads_the_versions_manifest_as_before(dlami):
    """Only a Deep Learning AMI's nodes name GPUFLEET_VERSIONS_MANIFEST: every other node reads versions.json, whatever
    else is in /etc/gpufleet."""
    dlami.run("deep-learning-ami.sh", **SETTINGS)
    (dlami.root / "etc/gpufleet/versions.json").write_text(json.dumps({"components": {"aws_ofi_nccl": "1.6.0"}}))

    dlami.run("efa-env.sh", **EFA_SETTINGS)

    assert env_file(dlami) == {
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "GPUFLEET_EFA_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # A DLAMI whose step did not run (or failed): efa-env.sh names the file it needed.
        (
            ON_A_DLAMI,
            "efa-env: error: /etc/gpufleet/deep-learning-ami.json is missing: the node image was not built by "
            "gpufleet (no versions manifest)",
        ),
        # Any other image without the manifest fails as before, whatever it has under /opt/amazon.
        (
            {},
            "efa-env: error: /etc/gpufleet/versions.json is missing: the node image was not built by gpufleet "
            "(no versions manifest)",
        ),
    ],
)
def test_without_a_manifest_efa_env_still_refuses(dlami, settings, message):
    done = dlami.run("efa-env.sh", check=False, **EFA_SETTINGS, **settings)

    assert done.returncode == 1
    assert done.stderr == message + "\n"
    assert not (dlami.root / "etc/gpufleet/efa.env").exists()
