"""ami/packages.yaml resolved per profile: the OS package names, version strings, repositories and extras topics
the scripts receive, the upstream rules they encode, and one clear line per problem in the data."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpufleet.ami.packages import load_tables, package_environment, package_names, resolve
from gpufleet.ami.profile import load_profile
from gpufleet.ami.render import build_files
from gpufleet.errors import GpufleetError


def test_shipped_profiles_resolve_to_these_package_names():
    assert package_names(load_profile("p4d-ubuntu1804-cuda11")) == {
        "fabric_manager": "nvidia-fabricmanager-450",
        "cudnn": "libcudnn8",
        "cudnn_dev": "libcudnn8-dev",
        "fsx_lustre": "lustre-client-utils",
        "container_toolkit": "nvidia-container-toolkit",
        "container_runtime": "nvidia-container-runtime",
    }
    assert package_names(load_profile("p4d-al2-cuda11")) == {
        "fabric_manager": "nvidia-fabricmanager-450",
        "cudnn": "libcudnn8",
        "cudnn_dev": "libcudnn8-devel",
        "fsx_lustre": "lustre-client",
        "container_toolkit": "nvidia-container-toolkit",
        "container_runtime": "nvidia-container-runtime",
    }
    # cuDNN 9 comes from the profile's tarball; the runtime is part of toolkit 1.17.8.
    assert package_names(load_profile("ubuntu2204-cuda12")) == {
        "fabric_manager": "nvidia-fabricmanager",
        "cudnn": "",
        "cudnn_dev": "",
        "fsx_lustre": "lustre-client-utils",
        "container_toolkit": "nvidia-container-toolkit",
        "container_runtime": "",
    }


def test_reference_profile_environment_is_what_the_script_tests_use():
    environment = {
        key: value for key, value in package_environment(load_profile("p4d-ubuntu1804-cuda11")).items() if value
    }
    assert environment == {
        "GPUFLEET_FABRIC_MANAGER_PACKAGE": "nvidia-fabricmanager-450",
        "GPUFLEET_CUDNN_PACKAGE": "libcudnn8",
        "GPUFLEET_CUDNN_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
        "GPUFLEET_CUDNN_REPOSITORIES": "https://developer.download.nvidia.com/compute/machine-learning/repos/"
        "ubuntu1804/x86_64/7fa2af80.pub|https://developer.download.nvidia.com/compute/machine-learning/repos/"
        "ubuntu1804/x86_64 /",
        "GPUFLEET_CUDNN_DEV_PACKAGE": "libcudnn8-dev",
        "GPUFLEET_CUDNN_DEV_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
        "GPUFLEET_FSX_LUSTRE_PACKAGE": "lustre-client-utils",
        "GPUFLEET_FSX_LUSTRE_REPOSITORIES": "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/"
        "fsx-ubuntu-public-key.asc|https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu bionic main",
        "GPUFLEET_CONTAINER_TOOLKIT_PACKAGE": "nvidia-container-toolkit",
        "GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES": "https://nvidia.github.io/libnvidia-container/gpgkey|"
        "https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/$(ARCH) /;"
        "https://nvidia.github.io/nvidia-container-runtime/gpgkey|"
        "https://nvidia.github.io/nvidia-container-runtime/stable/ubuntu18.04/$(ARCH) /",
        "GPUFLEET_CONTAINER_RUNTIME_PACKAGE": "nvidia-container-runtime",
        "GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION": "3.4.0",
    }


def test_amazon_linux_2_environment_pins_rpm_versions_and_the_lustre_topic():
    environment = package_environment(load_profile("p4d-al2-cuda11"))
    assert environment["GPUFLEET_CUDNN_PACKAGE_VERSION"] == "8.0.5.39-1.cuda11.0"
    assert environment["GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC"] == "lustre2.10"
    assert environment["GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES"] == (
        "https://nvidia.github.io/nvidia-container-runtime/stable/amzn2/nvidia-container-runtime.repo"
    )


@pytest.mark.parametrize(
    "profile,driver,package",
    [
        # RHEL 7 / Amazon Linux 2: branch packages up to 460.91, then nvidia-fabric-manager (gpu-driver-container).
        ("p4d-al2-cuda11", "450.80.02", "nvidia-fabricmanager-450"),
        ("p4d-al2-cuda11", "460.73.01", "nvidia-fabricmanager-460"),
        ("p4d-al2-cuda11", "460.91.03", "nvidia-fabric-manager"),
        ("p4d-al2-cuda11", "470.57.02", "nvidia-fabric-manager"),
        # Ubuntu: branch packages up to R575, then NVIDIA's nvidia-fabricmanager.
        ("p4d-ubuntu1804-cuda11", "470.57.02", "nvidia-fabricmanager-470"),
        ("ubuntu2204-cuda12", "575.57.08", "nvidia-fabricmanager-575"),
        ("ubuntu2204-cuda12", "580.95.05", "nvidia-fabricmanager"),
    ],
)
def test_fabric_manager_name_follows_os_family_and_driver_version(derive, profile, driver, package):
    derived = derive(profile, {"components.driver.version": driver, "components.fabric_manager.version": driver})
    assert package_names(derived)["fabric_manager"] == package


def test_no_fabric_manager_package_without_nvswitch(derive):
    assert package_names(derive("p4d-al2-cuda11", {"target.nvswitch": False}))["fabric_manager"] == ""


def test_fsx_lustre_2_12_on_amazon_linux_2_comes_from_the_lustre_topic(derive):
    derived = derive("p4d-al2-cuda11", {"components.fsx_lustre.version": "2.12.8"})
    assert package_environment(derived)["GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC"] == "lustre"


def test_runtime_package_only_before_toolkit_1_6(derive):
    modern = derive("p4d-ubuntu1804-cuda11", {"components.container_toolkit.version": "1.17.8"})
    assert package_names(modern)["container_runtime"] == ""


def test_a_profile_no_row_fits_is_refused_with_one_line_per_key(derive):
    profile = derive(
        "p4d-al2-cuda11", {"components.fsx_lustre.version": "2.11.0", "components.container_toolkit.version": "1.4.0"}
    )
    with pytest.raises(GpufleetError) as raised:
        resolve(profile)
    path = Path(__file__).resolve().parents[2] / "ami" / "packages.yaml"  # the checkout's own table
    assert list(raised.value.problems) == [
        f"{path}: fsx_lustre: no row for amzn 2, driver 450.80.02, fsx_lustre 2.11.0 (profile p4d-al2-cuda11): "
        "add one with its source",
        f"{path}: container_runtime: no row for amzn 2, driver 450.80.02, container_toolkit 1.4.0 "
        "(profile p4d-al2-cuda11): add one with its source",
    ]


def test_rendering_refuses_a_profile_without_package_rows(derive):
    with pytest.raises(GpufleetError, match="fsx_lustre: no row for amzn 2"):
        build_files(derive("p4d-al2-cuda11", {"components.fsx_lustre.version": "2.11.0"}))


def write_tables(tmp_path, text: str):
    path = tmp_path / "packages.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_overlapping_rows_are_an_error(tmp_path):
    path = write_tables(
        tmp_path,
        """\
        fabric_manager:
          component: fabric_manager
          rows:
            - {os_family: ubuntu, name: a, source: s}
            - {os_family: ubuntu, os_versions: ["18.04"], name: b, source: s}
        """,
    )
    with pytest.raises(GpufleetError) as raised:
        resolve(load_profile("p4d-ubuntu1804-cuda11"), path=path)
    assert raised.value.problems == (
        f"{path}: fabric_manager: rows overlap for ubuntu 18.04, driver 450.80.02, fabric_manager 450.80.02: "
        "os_family=ubuntu; os_family=ubuntu, os_versions=('18.04',) (narrow their selectors)",
    )


@pytest.mark.parametrize(
    "row,problem",
    [
        ("{os_family: ubuntu, name: a}", "fabric_manager.rows.0.source: required key is missing"),
        (
            "{os_family: ubuntu, name: 'nvidia-{driver}', source: s}",
            "fabric_manager.rows.0.name: 'nvidia-{driver}' uses driver (allowed: branch, cuda_major_minor, "
            "major, version)",
        ),
        (
            "{os_family: ubuntu, name: a, driver_min: r450, source: s}",
            "fabric_manager.rows.0.driver_min: 'r450' is not a dotted numeric version (e.g. 460.91)",
        ),
        (
            "{os_family: ubuntu, name: a, source: s, repositories: [{apt_source: 'https://x /'}]}",
            "fabric_manager.rows.0.repositories.0: give either key_url and apt_source (apt) or yum_repo_file (yum)",
        ),
    ],
)
def test_bad_rows_are_one_line_naming_file_and_field(tmp_path, row, problem):
    path = write_tables(
        tmp_path,
        f"""\
        fabric_manager:
          component: fabric_manager
          rows:
            - {row}
        """,
    )
    with pytest.raises(GpufleetError) as raised:
        load_tables(path)
    assert raised.value.problems == (f"{path}: {problem}",)


def test_every_shipped_row_names_its_source():
    for table in load_tables().values():
        assert all(row.source.strip() for row in table.rows)
