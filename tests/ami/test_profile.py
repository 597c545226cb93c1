"""Profiles: the shipped ones parse; bad ones give one exact line per problem and `render` writes nothing."""

from __future__ import annotations

import pytest

from gpufleet.ami.profile import load_profile, profile_files
from gpufleet.cli import main
from tests.ami.contract import COMPONENTS

SHIPPED = ["al2023-cuda13", "p4d-al2-cuda11", "p4d-ubuntu1804-cuda11", "ubuntu2204-cuda12", "ubuntu2404-cuda13"]


def test_shipped_profiles():
    assert [path.stem for path in profile_files()] == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_pins_every_component(name):
    profile = load_profile(name)
    assert tuple(profile.versions()) == COMPONENTS
    for key, component in profile.components.items():
        assert component.sha256 is not None or component.verification, key


def test_reference_profile_is_the_reference_stack():
    versions = load_profile("p4d-ubuntu1804-cuda11").versions()
    assert (versions["driver"], versions["fabric_manager"], versions["cuda"], versions["nccl"]) == (
        "450.80.02",
        "450.80.02",
        "11.0.3",
        "2.7.8",
    )
    assert versions["cudnn"].startswith("8.") and versions["aws_ofi_nccl"].startswith("1.1.")


def test_profiles_are_frozen():
    profile = load_profile("ubuntu2204-cuda12")
    with pytest.raises(ValueError):
        profile.components.driver.version = "1"


BAD_PROFILES = [
    (
        "unknown key",
        {"components.driver.checksum": "x"},
        "{path}: components.driver.checksum: unknown key (allowed here: version, url, sha256, signing_key_url, "
        "signing_key_fingerprint, verification)",
    ),
    (
        "unknown top-level key",
        {"extra": 1},
        "{path}: extra: unknown key (allowed here: name, description, os, target, build, components, python, "
        "end_of_life)",
    ),
    (
        "unknown key of end_of_life",
        {"end_of_life": {"date": "2023-05-31", "reason": "old", "since": "2023"}},
        "{path}: end_of_life.since: unknown key (allowed here: date, reason)",
    ),
    (
        "end_of_life without a date",
        {"end_of_life": {"date": "May 2023", "reason": "old"}},
        "{path}: end_of_life.date: input should be a valid date or datetime, input is too short, got 'May 2023'",
    ),
    (
        "unknown key of python",
        {"python.pip": "24.0"},
        "{path}: python.pip: unknown key (allowed here: uv, pytorch)",
    ),
    (
        "pytorch from another index",
        {"python.pytorch": {"version": "2.14.0", "index_url": "https://pypi.org/simple"}},
        "{path}: python.pytorch: index_url 'https://pypi.org/simple' is not a PyTorch CUDA wheel index "
        "(https://download.pytorch.org/whl/cuNNN, e.g. https://download.pytorch.org/whl/cu130)",
    ),
    (
        "pytorch not pinned",
        {"python.pytorch": {"version": "2.14", "index_url": "https://download.pytorch.org/whl/cu130"}},
        "{path}: python.pytorch: version '2.14' is not an exact PyTorch release (MAJOR.MINOR.PATCH, e.g. 2.14.0)",
    ),
    (
        "pytorch python not a version",
        {"python.pytorch": {"version": "2.14.0", "index_url": "https://download.pytorch.org/whl/cu130", "python": "3"}},
        "{path}: python.pytorch: python '3' is not a Python minor version such as 3.12 (or null)",
    ),
    (
        "missing component",
        {"components.onednn": None},
        "{path}: components.onednn: input should be a valid dictionary or instance of Component, got None",
    ),
    (
        "floating version",
        {"components.nccl.version": "latest"},
        "{path}: components.nccl: version 'latest' is not an exact version (digits first, e.g. 2.7.8)",
    ),
    (
        "branch head url",
        {"components.nccl.url": "https://github.com/NVIDIA/nccl/archive/refs/heads/master.tar.gz"},
        "{path}: components.nccl: url 'https://github.com/NVIDIA/nccl/archive/refs/heads/master.tar.gz' points at a "
        "moving target (latest, a branch): pin a release",
    ),
    (
        "null checksum without verification",
        {"components.cuda.verification": None},
        "{path}: components.cuda: sha256 is null: add verification (how the vendor lets you check this download)",
    ),
    (
        "malformed checksum",
        {"components.cuda.sha256": "abc"},
        "{path}: components.cuda: sha256 'abc' is not a SHA-256 digest (64 lower-case hex digits)",
    ),
    (
        "fingerprint with spaces",
        {"components.aws_cli.signing_key_fingerprint": "FB5D B77F D5C1 18B8 0511 ADA8 A631 0ACC 4672 475C"},
        "{path}: components.aws_cli: signing_key_fingerprint 'FB5D B77F D5C1 18B8 0511 ADA8 A631 0ACC 4672 475C' is "
        "not a key fingerprint (40 upper-case hex digits, no spaces)",
    ),
    (
        "unquoted owner",
        {"os.base_image.owner": 99720109477},
        "{path}: os.base_image.owner: input should be a valid string, got 99720109477 (put it in quotes)",
    ),
]


@pytest.mark.parametrize(
    ("changes", "message"), [case[1:] for case in BAD_PROFILES], ids=[case[0] for case in BAD_PROFILES]
)
def test_bad_profile_is_refused_and_nothing_is_written(capsys, tmp_path, write_profile, changes, message):
    path = write_profile("bad", changes)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert main(["ami", "render", str(path), "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.splitlines() == [message.format(path=path)]
    assert list(out_dir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "profiles"]


def test_malformed_yaml(capsys, tmp_path, write_profile):
    path = write_profile("broken", text="name: broken\ncomponents: [driver\n")
    out_dir = tmp_path / "out"
    assert main(["ami", "render", str(path), "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: line 3: not valid YAML (expected ',' or ']', but got '<stream end>')"
    ]
    assert not out_dir.exists()


def test_unknown_profile_name(capsys, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert main(["ami", "render", "p4d-nope", "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "unknown AMI profile 'p4d-nope' (shipped: al2023-cuda13, p4d-al2-cuda11, p4d-ubuntu1804-cuda11, "
        "ubuntu2204-cuda12, ubuntu2404-cuda13; "
        "or the path of a .yaml file)"
    ]
    assert list(out_dir.iterdir()) == []


def test_name_must_match_the_file(capsys, tmp_path, write_profile):
    path = write_profile("other", {"name": "p4d-ubuntu1804-cuda11"})
    assert main(["ami", "check", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: name: 'p4d-ubuntu1804-cuda11' differs from the file name (name it 'other' or rename the file to "
        "p4d-ubuntu1804-cuda11.yaml)"
    ]


def test_failing_gate_is_refused_and_nothing_is_written(capsys, tmp_path, write_profile):
    path = write_profile("mismatch", {"components.fabric_manager.version": "450.80.01"})
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert main(["ami", "render", str(path), "--out", str(out_dir)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "mismatch: FM-EQUALS-DRIVER: fabric_manager 450.80.01 differs from driver 450.80.02 (Fabric Manager must "
        "equal the driver version exactly)",
        "mismatch: refused: the compatibility gate has errors (see gpufleet ami check)",
    ]
    assert list(out_dir.iterdir()) == []
