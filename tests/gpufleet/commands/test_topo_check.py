# ruff: noqa: E501 -- table-driven cases hold rows of captured tool output, wider than the line limit
import io
import json
from pathlib import Path

import pytest

from gpufleet.cli import main


@pytest.mark.parametrize(
    "name, instance_type, code",
    [
        ("p4d.txt", "p4d.24xlarge", 0),
        ("p4d_ansi.txt", "p4d.24xlarge", 0),
        ("p5.txt", "p5.48xlarge", 0),
        ("g5_48xlarge.txt", "g5.48xlarge", 0),
        ("p4d_degraded.txt", "p4d.24xlarge", 1),
        ("p4d.txt", "p5.48xlarge", 1),
        ("p4d_truncated.txt", "p4d.24xlarge", 2),
        ("p4d_no_nic_legend.txt", "p4d.24xlarge", 0),
    ],
)
def test_exit_codes(fixture_path, capsys, name, instance_type, code):
    assert main(["topo-check", fixture_path("topo", name), "--instance-type", instance_type]) == code


def test_json(fixture_path, capsys):
    assert (
        main(["topo-check", fixture_path("topo", "p4d_degraded.txt"), "--instance-type", "p4d.24xlarge", "--json"]) == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert {"gpus", "links", "nvlink_pairs", "problems", "ok"} <= set(report)
    assert (report["gpus"], report["nvlink_pairs"], report["ok"]) == (8, 27, False)
    assert report["links"]["GPU3-GPU6"] == "SYS" and report["links"]["GPU0-GPU1"] == "NV12"
    assert len(report["links"]) == 28
    assert report["problems"] == ["GPU3-GPU6: SYS, expected an NVLink (NV#) on NVSwitch p4d.24xlarge"]
    assert report["nics"][3] == {"nic": "NIC3", "device": "rdmap160s27"}


def test_stdin(fixture_path, capsys, monkeypatch):
    with open(fixture_path("topo", "p5.txt")) as handle:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(handle.read().encode())))
    assert main(["topo-check", "--instance-type", "p5.48xlarge", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["gpus"], report["nvlink_pairs"], len(report["nics"]), report["ok"]) == (8, 28, 32, True)


def test_unknown_instance_type_lists_catalog(fixture_path, capsys):
    assert main(["topo-check", fixture_path("topo", "p4d.txt"), "--instance-type", "p4.huge"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--instance-type p4.huge: not in the catalog (known: ") and "p4d.24xlarge" in err
    assert len(err.splitlines()) == 1


def test_truncated_is_one_line_naming_file(fixture_path, capsys):
    path = fixture_path("topo", "p4d_truncated.txt")
    assert main(["topo-check", path, "--instance-type", "p4d.24xlarge"]) == 2
    assert capsys.readouterr().err.strip() == f"{path}: row GPU5 has 1 of 12 link cells (capture cut short?)"


@pytest.mark.parametrize(
    "name, nics",
    [
        ("p4d_no_nic_legend.txt", [{"nic": f"NIC{i}", "device": None} for i in range(4)]),
        ("p4d.txt", [{"nic": "NIC0", "device": "rdmap16s27"}, {"nic": "NIC1", "device": "rdmap32s27"},
                     {"nic": "NIC2", "device": "rdmap144s27"}, {"nic": "NIC3", "device": "rdmap160s27"}]),
    ],
)  # fmt: skip
def test_json_nics_with_and_without_legend(fixture_path, capsys, name, nics):
    assert main(["topo-check", fixture_path("topo", name), "--instance-type", "p4d.24xlarge", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["nics"], report["ok"], report["problems"]) == (nics, True, [])


def test_text_says_nic_devices_are_unknown(fixture_path, capsys):
    assert main(["topo-check", fixture_path("topo", "p4d_no_nic_legend.txt"), "--instance-type", "p4d.24xlarge"]) == 0
    out = capsys.readouterr().out
    assert "NICs: 4 (NIC0, NIC1, NIC2, NIC3); device names unknown: no NIC Legend" in out.splitlines()


def test_stdin_bytes_that_are_not_utf8_under_a_strict_locale(fixture_path, capsys, monkeypatch):
    # sys.stdin decodes strictly under a UTF-8 locale other than C.UTF-8 (en_US.UTF-8): topo-check reads the bytes.
    data = Path(fixture_path("topo", "p5.txt")).read_bytes() + b"\xff\xfe trailing noise\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict"))
    assert main(["topo-check", "--instance-type", "p5.48xlarge"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verdict: OK"


def test_a_file_far_larger_than_a_capture_is_refused_unread(capsys, tmp_path):
    path = tmp_path / "topo.txt"
    with path.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing written
    assert main(["topo-check", str(path), "--instance-type", "p4d.24xlarge"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: larger than 1 MiB, far more than an nvidia-smi topo -m capture (a few KB): refused unread"
    ]
