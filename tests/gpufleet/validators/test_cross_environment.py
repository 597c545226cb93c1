"""The rules between environment files (gpufleet/validators/cross_environment.py): two environments of one account
and region never name the same existing file system, however they are loaded: `gpufleet validate` of every file, of
some files, of one file beside the others; a command naming one environment; synthesis of all or of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.loading import ENVIRONMENTS_DIR_VARIABLE, load_environments, load_named_environment
from gpufleet.validators.cross_environment import validate_together
from tests.gpufleet.environment_files import VALID, changed, write
from tests.test_app import run_app

FILE_SYSTEM = "fs-0123456789abcdef0"
EXISTING = {
    "file_system_id": FILE_SYSTEM,
    "dns_name": f"{FILE_SYSTEM}.fsx.us-east-1.amazonaws.com",
    "mount_name": "abcdefgh",
    "security_group_id": "sg-0a1b2c3d",
}


def sharing(name: str, **changes: object) -> dict:
    """The valid lab environment named NAME, on the existing file system."""
    return changed({"name": name, "storage": {"existing": dict(EXISTING)}, **changes}, VALID)


def shared_line(path: Path, *others: Path) -> str:
    return (
        f"{path}: storage.existing.file_system_id: {FILE_SYSTEM} is also the file system of "
        f"{', '.join(map(str, others))} (account 123456789012, us-east-1): every cluster's user is uid 2000 with its "
        "home there, so each cluster's workloads could act as the other's (give each environment a file system of "
        "its own)"
    )


@pytest.fixture
def environments(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "environments"
    directory.mkdir()
    monkeypatch.setenv(ENVIRONMENTS_DIR_VARIABLE, str(directory))
    return directory


def refused(paths: list[Path]) -> list[str]:
    with pytest.raises(GpufleetError) as raised:
        load_environments(paths)
    return list(raised.value.problems)


def test_two_environments_on_one_file_system_are_refused_once_on_the_later_file(environments):
    first, second = write(environments, sharing("first"), "first"), write(environments, sharing("second"), "second")
    assert refused([first, second]) == [shared_line(second, first)]


def test_a_third_names_both_others(environments):
    paths = [write(environments, sharing(name), name) for name in ("first", "second", "third")]
    assert refused(paths) == [shared_line(paths[1], paths[0]), shared_line(paths[2], paths[0], paths[1])]


@pytest.mark.parametrize(
    "changes",
    [
        {
            "storage.existing.file_system_id": "fs-0fedcba9876543210",
            "storage.existing.dns_name": "fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com",
        },
        {"account": "210987654321"},
        {"region": "us-west-2", "availability_zone": "us-west-2a"},
        {"storage": {"lustre": {"throughput_mb_per_tib": 250}}},
        {"storage": None},
    ],
    ids=["another-file-system", "another-account", "another-region", "a-new-file-system", "no-storage"],
)
def test_environments_on_file_systems_of_their_own_pass(environments, changes):
    other = sharing("second", **changes)
    if "region" in changes:
        other["storage"]["existing"]["dns_name"] = f"{FILE_SYSTEM}.fsx.us-west-2.amazonaws.com"
    paths = [write(environments, sharing("first"), "first"), write(environments, other, "second")]
    assert [env.name for env in load_environments(paths)] == ["first", "second"]


def test_one_file_given_twice_is_one_environment(environments):
    path = write(environments, sharing("first"), "first")
    assert [env.name for env in load_environments([path, environments / ".." / "environments" / "first.yaml"])] == [
        "first",
        "first",
    ]


def test_a_file_is_compared_with_the_environments_beside_it(environments, capsys):
    first, second = write(environments, sharing("first"), "first"), write(environments, sharing("second"), "second")
    assert main(["validate", str(first)]) == 1
    assert capsys.readouterr().err == f"{shared_line(first, second)}\n"
    assert main(["validate"]) == 1
    assert capsys.readouterr().err == f"{shared_line(second, first)}\n"


def test_a_named_environment_is_compared_with_the_others(environments):
    first, second = write(environments, sharing("first"), "first"), write(environments, sharing("second"), "second")
    with pytest.raises(GpufleetError) as raised:
        load_named_environment("second")
    assert list(raised.value.problems) == [shared_line(second, first)]


def test_a_file_beside_that_does_not_parse_is_left_to_its_own_check(environments):
    write(environments, {**sharing("first"), "tpye": "x"}, "first")
    (environments / "notes.yaml").write_text("- not an environment\n")
    (environments / "old.yaml").mkdir()
    write(environments, sharing("second"), "second")
    assert load_named_environment("second").name == "second"


def test_a_file_that_fails_its_own_rules_is_not_compared(environments):
    first = write(environments, sharing("first", **{"capacity.on_demand": 5}), "first")
    second = write(environments, sharing("second"), "second")
    assert refused([first, second]) == [
        f"{first}: capacity.on_demand: 5 is outside the target capacity (0 to capacity.target, which is 2)"
    ]


def test_validate_together_compares_each_file_with_those_before_it_and_beside():
    first, second, third = (Environment.model_validate(sharing(name)) for name in ("first", "second", "third"))
    checked = [(Path("a/first.yaml"), first), (Path("a/second.yaml"), second)]
    assert validate_together(checked, beside=[(Path("b/third.yaml"), third)]) == [
        shared_line(Path("a/first.yaml"), Path("b/third.yaml")),
        shared_line(Path("a/second.yaml"), Path("a/first.yaml"), Path("b/third.yaml")),
    ]
    assert validate_together([]) == []


@pytest.mark.parametrize("context", [{}, {"env": "second"}], ids=["every-environment", "one-environment"])
def test_synthesis_stops_with_the_same_line(tmp_path, environments, context):
    first, second = write(environments, sharing("first"), "first"), write(environments, sharing("second"), "second")
    result = run_app(tmp_path, context, environments)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [shared_line(second, first)]
    assert not (tmp_path / "cdk.out/manifest.json").exists()
