"""gpufleet ami acceptance-environment: the gate's environment file for a new image, refused (before anything is
launched) when the gate's nodes could cost more than acceptance.max_cost_usd at the price the Price List API gives."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from gpufleet.cli import main
from gpufleet.loading import PIPELINE_FILE_VARIABLE
from tests.gate_pipeline import GATE
from tests.gpufleet.ami.pipeline_files import write
from tests.gpufleet.ops.test_cost import price_list_entry

IMAGE = "ami-0123456789abcdef0"


@pytest.fixture
def gate_file(tmp_path, monkeypatch):
    def configure(**changes):
        path = write(tmp_path, acceptance=None if changes.get("off") else {**GATE, **changes})
        monkeypatch.setenv(PIPELINE_FILE_VARIABLE, str(path))
        return path

    return configure


def price_list(tmp_path, *hourly: str):
    path = tmp_path / "price-list.json"
    path.write_text(json.dumps({"PriceList": [price_list_entry(usd) for usd in hourly], "FormatVersion": "aws_v1"}))
    return path


def generate(tmp_path, prices, *account: str):
    """The command as acceptance-gate.sh runs it: with the build's own account (ACCOUNT: --account and its value)."""
    account = account or ("--account", "123456789012")
    return main(
        ["ami", "acceptance-environment", "--name", "accept-5f0c1d2e", "--image", IMAGE, *account]
        + ["--price-list", str(prices), "--out", str(tmp_path / "environments")]
    )


def test_writes_an_on_demand_environment_of_the_new_image_in_the_borrowed_network(tmp_path, gate_file, capsys):
    gate_file()
    assert generate(tmp_path, price_list(tmp_path, "32.7726000000")) == 0
    written = tmp_path / "environments" / "accept-5f0c1d2e.yaml"
    assert yaml.safe_load(written.read_text()) == {
        "name": "accept-5f0c1d2e",
        "account": "123456789012",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "network": {"vpc_id": "vpc-0123456789abcdef0", "subnet_id": "subnet-0123456789abcdef0"},
        "instance_type": "p4d.24xlarge",
        "capacity": {"target": 2, "on_demand": 2},
        "fleet": {"backend": "auto-scaling"},
        "ami": {"id": IMAGE},
        "tags": {"purpose": "ami-acceptance"},
    }
    assert capsys.readouterr().out == (
        f"{written}: 2 x p4d.24xlarge at 32.7726000000 USD/h for up to 90 minutes: at most 98.32 USD "
        "(max_cost_usd 100)\n"
    )


def test_a_bound_the_nodes_could_exceed_launches_nothing(tmp_path, gate_file, capsys):
    path = gate_file(max_cost_usd=98)
    assert generate(tmp_path, price_list(tmp_path, "32.7726000000")) == 1
    assert capsys.readouterr().err == (
        f"{path}: acceptance.max_cost_usd: 2 x p4d.24xlarge at 32.7726000000 USD/h for up to 90 minutes may cost "
        "98.32 USD, more than 98 (raise max_cost_usd, or lower nodes or timeout_minutes)\n"
    )
    assert not (tmp_path / "environments").exists()


def test_no_price_launches_nothing(tmp_path, gate_file, capsys):
    gate_file()
    prices = price_list(tmp_path)
    assert generate(tmp_path, prices) == 1
    assert capsys.readouterr().err == (
        f"{prices}: the Price List API has no on-demand Linux price for p4d.24xlarge in us-east-1\n"
    )
    assert not (tmp_path / "environments").exists()


def test_a_gate_that_is_off_is_bad_input(tmp_path, gate_file, capsys):
    path = gate_file(off=True)
    assert generate(tmp_path, price_list(tmp_path, "32.7726000000")) == 2
    assert capsys.readouterr().err == f"{path}: acceptance: null, the gate is off (nothing to deploy)\n"


def test_an_invalid_environment_is_reported_like_any_environment_file(tmp_path, gate_file, capsys):
    gate_file()
    code = main(
        ["ami", "acceptance-environment", "--name", "Accept_1", "--image", IMAGE, "--account", "123456789012"]
        + ["--price-list", str(price_list(tmp_path, "32.7726000000")), "--out", str(tmp_path / "environments")]
    )
    assert code == 1
    assert capsys.readouterr().err == (
        f"{tmp_path / 'environments' / 'Accept_1.yaml'}: name: 'Accept_1' is not a valid name (lower-case letters, "
        "digits and '-', starting with a letter, at most 24 characters)\n"
    )


def test_without_an_account_anywhere_nothing_is_written(tmp_path, gate_file, capsys):
    path = gate_file()
    assert generate(tmp_path, price_list(tmp_path, "32.7726000000"), "--image", IMAGE) == 2
    assert capsys.readouterr().err == (
        f"{path}: account: null and no --account: give the account the gate deploys in (the build's own)\n"
    )
    assert not (tmp_path / "environments").exists()


def test_a_pinned_account_is_the_gates_and_another_is_refused(tmp_path, gate_file, capsys):
    path = write(tmp_path, account="210987654321", acceptance=GATE)
    os.environ[PIPELINE_FILE_VARIABLE] = str(path)
    try:
        assert generate(tmp_path, price_list(tmp_path, "32.7726000000"), "--image", IMAGE) == 0
        written = yaml.safe_load((tmp_path / "environments" / "accept-5f0c1d2e.yaml").read_text())
        assert written["account"] == "210987654321"
        capsys.readouterr()
        assert generate(tmp_path, price_list(tmp_path, "32.7726000000")) == 1
        assert capsys.readouterr().err == (
            "--account 123456789012: ami/pipeline.yaml pins account 210987654321, where the images are built\n"
        )
    finally:
        del os.environ[PIPELINE_FILE_VARIABLE]
