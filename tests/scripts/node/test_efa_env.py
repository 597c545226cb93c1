"""efa-env.sh: the EFA/NCCL variables follow the aws-ofi-nccl version in /etc/gpufleet/versions.json."""

import json
import shutil
import subprocess

import pytest

from tests.scripts.efa_install import install_efa

OBSOLETE = ("FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA")
NEVER = ("RDMAV_FORK_SAFE", "NCCL_MIN_CHANNELS", "NCCL_BUFFSIZE", "FI_EFA_FORK_SAFE")
# Ubuntu layout, plugin at the default prefix (images whose manifest records no paths.aws_ofi_nccl_lib).
LIBRARY_PATH = "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/aws-ofi-nccl/lib"
SETTINGS = {"GPUFLEET_EFA": "1", "GPUFLEET_GPUDIRECT_RDMA": "1"}


@pytest.fixture(autouse=True)
def ubuntu_efa(node):
    """An Ubuntu node image: the EFA installer's libraries in lib. Tests of other layouts add to or replace it."""
    install_efa(node.root, "ubuntu")


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

    assert env_file(node) == {**expected, "GPUFLEET_EFA_LIBRARY_PATH": LIBRARY_PATH}


def test_old_plugin_profile_script(node):
    write_manifest(node, "1.1.4-aws")

    node.run("efa-env.sh", **SETTINGS)

    profile = (node.root / "etc/profile.d/gpufleet-efa.sh").read_text()
    for line in (
        "export FI_PROVIDER=efa",
        "export NCCL_PROTO=simple",
        "export FI_EFA_USE_DEVICE_RDMA=1",
        "export GPUFLEET_EFA_LIBRARY_PATH=" + LIBRARY_PATH,
    ):
        assert line in profile.splitlines()
    assert "aws-ofi-nccl 1.1.4-aws" in profile.splitlines()[0]


def test_new_plugin_sets_none_of_the_obsolete_variables(node):
    write_manifest(node, "1.14.0")

    node.run("efa-env.sh", **SETTINGS)

    outputs = ("etc/profile.d/gpufleet-efa.sh", "etc/gpufleet/efa.env")
    written = "".join((node.root / path).read_text() for path in outputs)
    for name in OBSOLETE + NEVER:
        assert name not in written


def source_profile(node, times: int = 1, shell: str = "sh") -> str:
    """LD_LIBRARY_PATH and FI_EFA_USE_DEVICE_RDMA after sourcing the profile script `times` times."""
    profile = node.root / "etc/profile.d/gpufleet-efa.sh"
    done = subprocess.run(
        [shell, "-c", f'{f". {profile} && " * times}echo "$LD_LIBRARY_PATH ${{FI_EFA_USE_DEVICE_RDMA:-}}"'],
        env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_profile_script_sources_and_prepends_to_the_library_path(node, shell):
    write_manifest(node, "1.6.4")
    node.run("efa-env.sh", **SETTINGS)

    assert source_profile(node, shell=shell) == f"{LIBRARY_PATH}:/usr/local/cuda/lib64 1"


def test_profile_script_sourced_again_adds_nothing(node):
    write_manifest(node, "1.14.0")
    node.run("efa-env.sh", **SETTINGS)

    assert source_profile(node, times=2) == f"{LIBRARY_PATH}:/usr/local/cuda/lib64"


def test_env_file_leaves_a_containers_library_path_alone(node):
    """docker --env-file sets each NAME=VALUE as written (docker/cli pkg/kvfile: no interpolation), so efa.env must
    not hold LD_LIBRARY_PATH; the container prepends GPUFLEET_EFA_LIBRARY_PATH to its own, as the file says."""
    write_manifest(node, "1.7.3-aws")
    node.run("efa-env.sh", **SETTINGS)
    env_text = (node.root / "etc/gpufleet/efa.env").read_text()
    container_env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", **env_file(node)}

    inside = subprocess.run(
        [
            "sh",
            "-c",
            'export LD_LIBRARY_PATH="$GPUFLEET_EFA_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; '
            'echo "$LD_LIBRARY_PATH"',
        ],
        env=container_env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert "LD_LIBRARY_PATH" not in env_file(node)
    assert "prepend it to LD_LIBRARY_PATH" in env_text
    assert inside.stdout.strip() == f"{LIBRARY_PATH}:/usr/local/nvidia/lib64"


def test_rerun_gives_the_same_files(node):
    write_manifest(node, "1.7.3-aws")
    node.run("efa-env.sh", **SETTINGS)
    first = (node.root / "etc/gpufleet/efa.env").read_text()

    node.run("efa-env.sh", **SETTINGS)

    assert (node.root / "etc/gpufleet/efa.env").read_text() == first
    assert sorted(p.name for p in (node.root / "etc/gpufleet").iterdir()) == ["efa.env", "versions.json"]


NOT_A_MANIFEST = (
    "/etc/gpufleet/versions.json is not a versions manifest: expected JSON of at most 64 KiB with "
    "components.aws_ofi_nccl, and paths.aws_ofi_nccl_lib if any, each a string on one line"
)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "/etc/gpufleet/versions.json is missing"),
        ("{not json", NOT_A_MANIFEST),
        ("no-plugin", NOT_A_MANIFEST),
        ("master", "components.aws_ofi_nccl in /etc/gpufleet/versions.json is 'master', not a version"),
        # Read as two lines before: the version's second line became the plugin's directory.
        ("two lines", NOT_A_MANIFEST),
        ('{"components": {"aws_ofi_nccl": ["1.7.3"]}}', NOT_A_MANIFEST),
        ("far too large", NOT_A_MANIFEST),
    ],
)
def test_unknown_or_missing_manifest_is_a_clear_error(node, manifest, message):
    if manifest == "no-plugin":
        write_manifest(node, None)
    elif manifest == "master":
        write_manifest(node, "master")
    elif manifest == "two lines":
        write_manifest(node, "1.7.3\n/tmp/elsewhere")
    elif manifest == "far too large":
        write_manifest(node, "1.7.3")
        with (node.root / "etc/gpufleet/versions.json").open("ab") as handle:
            handle.truncate(256 * 1024 * 1024)  # sparse: nothing written
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
    assert not (node.root / "etc/gpufleet").exists()
    assert not (node.root / "etc/profile.d").exists()


def write_manifest_with_plugin_dir(node, plugin_dir: str) -> None:
    """What 17-validate.sh writes on images whose EFA installer ships the plugin: paths.aws_ofi_nccl_lib."""
    manifest = node.root / "etc/gpufleet/versions.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps({"components": {"aws_ofi_nccl": "1.16.3"}, "paths": {"aws_ofi_nccl_lib": plugin_dir}})
    )


def test_library_path_follows_the_plugin_directory_the_image_recorded(node):
    write_manifest_with_plugin_dir(node, "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu")

    node.run("efa-env.sh", **SETTINGS)

    assert env_file(node) == {
        "GPUFLEET_EFA_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:"
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    }


def test_amazon_linux_2_layout_uses_lib64(node):
    shutil.rmtree(node.root / "opt/amazon")
    install_efa(node.root, "al2")
    write_manifest_with_plugin_dir(node, "/opt/amazon/ofi-nccl/lib64")

    node.run("efa-env.sh", **SETTINGS)

    library_path = "/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib64:/opt/amazon/ofi-nccl/lib64"
    assert env_file(node) == {"GPUFLEET_EFA_LIBRARY_PATH": library_path}
    assert (
        f"export GPUFLEET_EFA_LIBRARY_PATH={library_path}"
        in (node.root / "etc/profile.d/gpufleet-efa.sh").read_text().splitlines()
    )


def test_the_directory_that_holds_the_library_wins_over_one_that_merely_exists(node):
    (node.root / "opt/amazon/efa/lib64").mkdir()  # e.g. left behind by another package, without libfabric
    write_manifest(node, "1.14.0")

    node.run("efa-env.sh", **SETTINGS)

    assert env_file(node)["GPUFLEET_EFA_LIBRARY_PATH"] == LIBRARY_PATH


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("opt/amazon", "no libfabric.so in /opt/amazon/efa/lib64 or /opt/amazon/efa/lib: the EFA installer did not"),
        ("opt/amazon/openmpi/lib", "no libmpi.so in /opt/amazon/openmpi/lib64 or /opt/amazon/openmpi/lib"),
    ],
)
def test_missing_efa_libraries_are_a_clear_error(node, missing, message):
    shutil.rmtree(node.root / missing)
    write_manifest(node, "1.14.0")

    result = node.run("efa-env.sh", check=False, **SETTINGS)

    assert result.returncode == 1
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (node.root / "etc/gpufleet/efa.env").exists()


def test_profile_script_puts_fi_info_and_mpirun_on_the_path_once(node):
    """The EFA installer's bin directories reach PATH through its own login-shell profile only (zippy_efa.sh);
    a run unit or an acceptance shell that sources gpufleet-efa.sh must find fi_info and Amazon's mpirun too."""
    write_manifest(node, "1.14.0")
    node.run("efa-env.sh", **SETTINGS)
    profile = node.root / "etc/profile.d/gpufleet-efa.sh"

    done = subprocess.run(
        ["sh", "-c", f'. {profile} && . {profile} && echo "$PATH"'],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:/usr/bin:/bin"
