"""efa-env.sh: the EFA/NCCL variables follow the aws-ofi-nccl version in /etc/gpufleet/versions.json."""

import json
import subprocess

import pytest

OBSOLETE = ("FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA")
NEVER = ("RDMAV_FORK_SAFE", "NCCL_MIN_CHANNELS", "NCCL_BUFFSIZE", "FI_EFA_FORK_SAFE")
LIBRARY_PATH = "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib"
SETTINGS = {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": "1"}


def write_manifest(node, aws_ofi_nccl: str | None) -> None:
    components = {"driver": "450.80.02", "nccl": "2.7.8"}
    if aws_ofi_nccl is not None:
        components["aws_ofi_nccl"] = aws_ofi_nccl
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"profile": "p4d-ubuntu1804-cuda11", "components": components}))


def env_file(node) -> dict[str, str]:
    lines = (node.root / "etc/gpufleet/efa.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if not line.startswith("#"))


@pytest.mark.parametrize(
    ("version", "gpudirect_rdma", "expected"),
    [
        ("1.1.4-aws", "1", {"FI_PROVIDER": "efa", "NCCL_PROTO": "simple", "FI_EFA_USE_DEVICE_RDMA": "1"}),
        ("v1.1.1", "0", {"FI_PROVIDER": "efa", "NCCL_PROTO": "simple"}),
        ("1.5.0", "1", {"FI_PROVIDER": "efa", "NCCL_PROTO": "simple", "FI_EFA_USE_DEVICE_RDMA": "1"}),
        ("1.6.0", "1", {"FI_EFA_USE_DEVICE_RDMA": "1"}),
        ("1.6.9", "0", {}),
        ("1.7.0", "1", {}),
        ("1.10.0", "1", {}),
        ("1.14.0", "1", {}),
        ("1.17.2-aws", "1", {}),
    ],
)
def test_variables_follow_the_plugin_version(node, version, gpudirect_rdma, expected):
    write_manifest(node, version)

    node.run("efa-env.sh", **{**SETTINGS, "GPUFLEET_GPUDIRECT_RDMA": gpudirect_rdma})

    assert env_file(node) == {**expected, "LD_LIBRARY_PATH": LIBRARY_PATH}


def test_old_plugin_profile_script(node):
    write_manifest(node, "1.1.4-aws")

    node.run("efa-env.sh", **SETTINGS)

    profile = (node.root / "etc/profile.d/gpufleet-efa.sh").read_text()
    for line in ("export FI_PROVIDER=efa", "export NCCL_PROTO=simple", "export FI_EFA_USE_DEVICE_RDMA=1",
                 "export LD_LIBRARY_PATH=" + LIBRARY_PATH + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"):
        assert line in profile.splitlines()
    assert "aws-ofi-nccl 1.1.4-aws" in profile.splitlines()[0]


def test_new_plugin_sets_none_of_the_obsolete_variables(node):
    write_manifest(node, "1.14.0")

    node.run("efa-env.sh", **SETTINGS)

    outputs = ("etc/profile.d/gpufleet-efa.sh", "etc/gpufleet/efa.env")
    written = "".join((node.root / path).read_text() for path in outputs)
    for name in OBSOLETE + NEVER:
        assert name not in written


def test_profile_script_sources_and_appends_to_the_library_path(node):
    write_manifest(node, "1.6.4")
    node.run("efa-env.sh", **SETTINGS)

    profile = node.root / "etc/profile.d/gpufleet-efa.sh"
    shell = subprocess.run(
        ["bash", "-c", f'. "{profile}" && echo "$LD_LIBRARY_PATH $FI_EFA_USE_DEVICE_RDMA"'],
        env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )
    assert shell.stdout.strip() == f"{LIBRARY_PATH}:/usr/local/cuda/lib64 1"


def test_rerun_gives_the_same_files(node):
    write_manifest(node, "1.7.3-aws")
    node.run("efa-env.sh", **SETTINGS)
    first = (node.root / "etc/gpufleet/efa.env").read_text()

    node.run("efa-env.sh", **SETTINGS)

    assert (node.root / "etc/gpufleet/efa.env").read_text() == first
    assert sorted(p.name for p in (node.root / "etc/gpufleet").iterdir()) == ["efa.env", "versions.json"]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "/etc/gpufleet/versions.json is missing"),
        ("{not json", "/etc/gpufleet/versions.json is not valid JSON or has no components.aws_ofi_nccl"),
        ("no-plugin", "/etc/gpufleet/versions.json is not valid JSON or has no components.aws_ofi_nccl"),
        ("master", "components.aws_ofi_nccl in /etc/gpufleet/versions.json is 'master', not a version"),
    ],
)
def test_unknown_or_missing_manifest_is_a_clear_error(node, manifest, message):
    if manifest == "no-plugin":
        write_manifest(node, None)
    elif manifest == "master":
        write_manifest(node, "master")
    elif manifest is not None:
        (node.root / "etc/gpufleet").mkdir(parents=True)
        (node.root / "etc/gpufleet/versions.json").write_text(manifest)

    result = node.run("efa-env.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert message in result.stderr
    assert not (node.root / "etc/profile.d/gpufleet-efa.sh").exists()


def test_disabled_writes_nothing(node):
    result = node.run("efa-env.sh", **{**SETTINGS, "GPUFLEET_EFA": "0"})

    assert "disabled" in result.stdout
    assert not (node.root / "etc").exists()


def test_library_path_follows_the_plugin_directory_the_image_recorded(node):
    """Images whose EFA installer ships the plugin record where it is (15-validate.sh: paths.aws_ofi_nccl_lib)."""
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"components": {"aws_ofi_nccl": "1.16.3"},
                                    "paths": {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"}}))

    node.run("efa-env.sh", **SETTINGS)

    assert env_file(node) == {
        "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    }
