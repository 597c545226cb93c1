"""`gpufleet acceptance`'s verdicts: the marker sections, the health check's output, fi_info as AWS's EFA docs show it
(tests/fixtures/fi_info/README.md), nccl-tests logs (tests/fixtures/nccl/) against the floor, and the report
directory written whole or not at all."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from gpufleet.reports import acceptance
from gpufleet.reports.acceptance import (
    AcceptanceReport,
    Check,
    NodeReport,
    Section,
    efa_check,
    efa_domains,
    efa_skipped,
    health_check,
    nccl_not_run,
    nccl_result,
    ready_check,
    split_sections,
    write_report,
)

FIXTURES = Path(__file__).parents[2] / "fixtures"
FI_INFO_P4D = (FIXTURES / "fi_info" / "p4d_multiple_interfaces.txt").read_text()
FI_INFO_ONE = (FIXTURES / "fi_info" / "single_interface_all_endpoints.txt").read_text()


def nccl_log(name: str, status: int = 0) -> Section:
    """A fixture log as the head sends it back: its per-rank and NCCL INFO lines left out, with run-nccl-tests.sh's
    exit STATUS."""
    text = (FIXTURES / "nccl" / f"{name}.log").read_text()
    kept = [line for line in text.splitlines() if not line.startswith("#  Rank ") and " NCCL INFO " not in line]
    return Section(tuple(kept), status)


def test_sections_are_the_lines_between_a_checks_markers_with_its_exit_status():
    output = (
        "gpufleet-acceptance: health begin\n"
        "PASS gpu-count: 8 GPUs visible (expected 8)\n"
        "node healthy\n"
        "gpufleet-acceptance: health exit 0\n"
        "stray line\n"
        "gpufleet-acceptance: fi_info begin\n"
        "provider: efa\n"
    )
    assert split_sections(output) == {
        "health": Section(("PASS gpu-count: 8 GPUs visible (expected 8)", "node healthy"), 0),
        "fi_info": Section(("provider: efa",), None),
    }


def test_fi_info_lists_one_device_per_rdm_domain_of_provider_efa():
    assert efa_domains(tuple(FI_INFO_P4D.splitlines())) == ["efa_0-rdm", "efa_1-rdm", "efa_2-rdm", "efa_3-rdm"]
    # The DGRAM endpoint and the efa;ofi_rxd utility provider over it are the same device.
    assert efa_domains(tuple(FI_INFO_ONE.splitlines())) == ["efa_0-rdm"]


def test_the_efa_check_compares_the_devices_with_the_catalog():
    assert efa_check(Section(tuple(FI_INFO_P4D.splitlines()), 0), 4, "").detail == (
        "4 EFA devices (expected 4): efa_0-rdm, efa_1-rdm, efa_2-rdm, efa_3-rdm"
    )
    assert efa_check(Section(tuple(FI_INFO_P4D.splitlines()), 0), 4, "").status == "pass"
    one = efa_check(Section(tuple(FI_INFO_ONE.splitlines()), 0), 4, "")
    assert (one.status, one.detail) == ("fail", "1 EFA devices (expected 4): efa_0-rdm")


def test_an_efa_provider_missing_fails_with_fi_infos_own_words():
    # What fi_info prints without the EFA driver (AWS ParallelCluster's docs: "fi_getinfo: -61").
    check = efa_check(Section(("fi_getinfo: -61",), 1), 4, "")
    assert (check.status, check.detail) == ("fail", "fi_info -p efa found no EFA provider (fi_getinfo: -61)")


def test_a_type_or_environment_without_efa_skips_the_efa_check():
    assert efa_skipped("g5.48xlarge", True) == Check("efa", "skipped", "not checked: g5.48xlarge has no EFA")
    assert efa_skipped("p4d.24xlarge", False) == Check("efa", "skipped", "not checked: the environment sets efa: false")


def test_the_health_check_passes_on_exit_0_and_fails_with_its_fail_lines():
    healthy = Section(("PASS gpu-count: 8 GPUs visible (expected 8)", "node healthy"), 0)
    assert health_check(healthy, "").detail == "node healthy"
    failing = Section(
        (
            "PASS gpu-count: 8 GPUs visible (expected 8)",
            "FAIL fabric-manager: nvidia-fabricmanager is inactive (NVSwitch needs it active, or CUDA fails with "
            "error 802)",
            "FAIL efa: 3 EFA devices (expected 4)",
            "node unhealthy: 2 check(s) failed",
        ),
        1,
    )
    check = health_check(failing, "")
    assert (check.status, check.detail) == (
        "fail",
        "fabric-manager: nvidia-fabricmanager is inactive (NVSwitch needs it active, or CUDA fails with error 802); "
        "efa: 3 EFA devices (expected 4)",
    )


def test_a_health_check_that_timed_out_died_or_never_ran_fails_saying_so():
    assert health_check(Section(("PASS gpu-count: 8 GPUs",), 124), "").detail == "timed out on the node"
    missing = Section(("node-health-check.sh: error: GPUFLEET_GPU_COUNT is not set",), 2)
    assert health_check(missing, "").detail == "exit 2: node-health-check.sh: error: GPUFLEET_GPU_COUNT is not set"
    assert health_check(Section(("PASS gpu-count: 8 GPUs",), None), "").detail == (
        "cut short: the output ends before the check did (last line: PASS gpu-count: 8 GPUs)"
    )
    assert health_check(None, "sh: 1: timeout: not found\n").detail == (
        "not run: no health check output (last line: sh: 1: timeout: not found)"
    )


def test_a_node_that_never_said_ready_fails_its_ready_check():
    assert ready_check("ready") == Check("ready", "pass", "ready")
    assert ready_check("booting").detail == "still booting: its setup has not finished (see `gpufleet status`)"
    assert ready_check("booting: step 4/9 shared-storage").detail == (
        "still booting: at setup step 4/9 shared-storage (see `gpufleet status`)"
    )
    assert ready_check("").detail == "no readiness tag: its setup never reached node-ready.sh (see its console output)"
    assert ready_check("not ready: health check failed: efa") == Check(
        "ready", "fail", "not ready: health check failed: efa"
    )


def test_a_two_node_all_reduce_above_the_floor_passes():
    result = nccl_result(nccl_log("p4d_2node_all_reduce"), Section((), 0), 70.2, 1200, "", (2, 8))
    assert (result.status, result.problems) == ("pass", ())
    assert result.detail == "all_reduce on 2 nodes x 8 GPUs: peak busbw 78.66 GB/s at 2 GiB (floor 70.2 GB/s)"


def test_a_peak_below_the_floor_fails():
    result = nccl_result(nccl_log("p4d_2node_all_reduce", 1), Section((), 1), 438.3, 1200, "", (2, 8))
    assert result.problems == ("all_reduce: peak busbw 78.66 GB/s is below --min-busbw 438.3 GB/s",)


def test_wrong_elements_fail():
    result = nccl_result(nccl_log("p4d_all_reduce_wrong", 1), Section((), 1), 70.2, 1200, "", (2, 8))
    assert result.problems == (
        "all_reduce: 1027 wrong elements",
        "all_reduce: peak busbw 41.36 GB/s is below --min-busbw 70.2 GB/s",
    )


def test_a_run_the_timeout_cut_short_fails_saying_so():
    log = nccl_log("p4d_all_reduce_truncated", 124)
    result = nccl_result(log, Section(("Terminated",), 124), 70.2, 1200, "", (2, 8))
    assert result.problems == (
        "all_reduce: log truncated after 18 rows (no 'Avg bus bandwidth' line)",
        "all_reduce: peak busbw 22.93 GB/s is below --min-busbw 70.2 GB/s",
        "cut short: nccl-tests ran past 1200 s (--nccl-timeout)",
    )


def test_a_run_without_a_table_fails_with_the_scripts_last_line():
    script = Section(("run-nccl-tests: error: hostfile /tmp/x/hosts lists no hosts",), 2)
    result = nccl_result(Section(("",), 2), script, 70.2, 1200, "", (2, 8))
    assert result.problems == (
        "no nccl-tests results table (expected a '#  size  count  type ...' header and rows) (run-nccl-tests.sh: "
        "run-nccl-tests: error: hostfile /tmp/x/hosts lists no hosts)",
    )


def test_a_failed_script_fails_the_check_even_when_the_table_passes():
    script = Section(("run-nccl-tests: error: mpirun failed (exit 1); log: /tmp/x/nccl.log",), 1)
    result = nccl_result(nccl_log("p4d_2node_all_reduce", 1), script, 70.2, 1200, "", (2, 8))
    assert result.problems == (
        "run-nccl-tests.sh exit 1: run-nccl-tests: error: mpirun failed (exit 1); log: /tmp/x/nccl.log",
    )


def test_no_log_from_the_head_fails_with_its_last_line():
    result = nccl_result(None, None, 70.2, 1200, "runuser: user gpufleet does not exist\n", (2, 8))
    assert result.detail == (
        "not run: no nccl-tests log came back from the head (last line: runuser: user gpufleet does not exist)"
    )


STARTED = dt.datetime(2026, 11, 26, 21, 5, 0, tzinfo=dt.UTC)


def report(nccl: acceptance.NcclResult, readiness: str = "ready") -> AcceptanceReport:
    node = NodeReport(
        "i-0000000000000000a",
        "10.40.0.4",
        "on-demand",
        readiness,
        (
            ready_check(readiness),
            Check("health", "pass", "node healthy", ("node healthy",)),
            Check("efa", "pass", "4 EFA devices (expected 4)"),
        ),
    )
    return AcceptanceReport(
        environment="dev",
        instance_type="p4d.24xlarge",
        started_at=STARTED,
        finished_at=STARTED + dt.timedelta(minutes=3),
        nodes=(node,),
        nccl=nccl,
        nccl_nodes=("i-0000000000000000a",),
        gpus_per_node=8,
        published_busbw=78.0,
        floor=70.2,
    )


def test_the_report_directory_holds_the_text_the_json_the_log_and_the_plot(tmp_path):
    passed = nccl_result(nccl_log("p4d_2node_all_reduce"), Section((), 0), 70.2, 1200, "", (1, 8))
    write_report(tmp_path / "out", report(passed))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "acceptance.json",
        "acceptance.txt",
        "busbw.png",
        "nccl.log",
    ]
    assert (tmp_path / "out" / "busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "acceptance.txt").read_text() == (
        "acceptance dev (p4d.24xlarge), 2026-11-26T21:05:00Z: 1 running nodes, 1 ready\n"
        "i-0000000000000000a (10.40.0.4) ready: PASS ready\n"
        "i-0000000000000000a (10.40.0.4) health: PASS node healthy\n"
        "i-0000000000000000a (10.40.0.4) efa: PASS 4 EFA devices (expected 4)\n"
        "nccl: PASS all_reduce on 1 nodes x 8 GPUs: peak busbw 78.66 GB/s at 2 GiB (floor 70.2 GB/s)\n"
        "verdict: PASS\n"
    )
    document = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert document == {
        "schema_version": 1,
        "environment": "dev",
        "instance_type": "p4d.24xlarge",
        "started_at": "2026-11-26T21:05:00Z",
        "finished_at": "2026-11-26T21:08:00Z",
        "passed": True,
        "nodes": [
            {
                "instance_id": "i-0000000000000000a",
                "private_ip": "10.40.0.4",
                "lifecycle": "on-demand",
                "readiness": "ready",
                "passed": True,
                "checks": {
                    "ready": {"status": "pass", "detail": "ready", "output": []},
                    "health": {"status": "pass", "detail": "node healthy", "output": ["node healthy"]},
                    "efa": {"status": "pass", "detail": "4 EFA devices (expected 4)", "output": []},
                },
            }
        ],
        "nccl": {
            "status": "pass",
            "detail": "all_reduce on 1 nodes x 8 GPUs: peak busbw 78.66 GB/s at 2 GiB (floor 70.2 GB/s)",
            "problems": [],
            "instance_ids": ["i-0000000000000000a"],
            "gpus_per_node": 8,
            "published_busbw_gbs": 78.0,
            "floor_busbw_gbs": 70.2,
            "peak_busbw_gbs": 78.66,
            "peak_size_bytes": 2147483648,
            "avg_busbw_gbs": 27.4285,
            "wrong": 0,
            "truncated": False,
            "exit_status": 0,
            "log_file": "nccl.log",
            "plot_file": "busbw.png",
        },
        "failures": [],
    }


def test_a_failed_report_names_each_failure_and_has_no_plot_without_a_table(tmp_path):
    write_report(tmp_path / "out", report(nccl_not_run("1 ready node(s), fewer than --min-nodes 2"), "booting"))
    text = (tmp_path / "out" / "acceptance.txt").read_text().splitlines()
    assert text[1] == (
        "i-0000000000000000a (10.40.0.4) ready: FAIL still booting: its setup has not finished (see `gpufleet status`)"
    )
    assert text[-2:] == [
        "nccl: FAIL not run: 1 ready node(s), fewer than --min-nodes 2",
        "verdict: FAIL (2 failed checks)",
    ]
    document = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert document["failures"] == [
        "i-0000000000000000a (10.40.0.4) ready: still booting: its setup has not finished (see `gpufleet status`)",
        "nccl: not run: 1 ready node(s), fewer than --min-nodes 2",
    ]
    assert (document["passed"], document["nccl"]["plot_file"], document["nccl"]["log_file"]) == (False, None, None)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["acceptance.json", "acceptance.txt"]


def test_a_report_that_fails_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    seen_while_writing = []

    def broken_plot(*_: object) -> None:
        seen_while_writing.extend(path.name for path in tmp_path.iterdir())
        raise OSError("No space left on device")

    monkeypatch.setattr(acceptance, "plot_busbw", broken_plot)
    passed = nccl_result(nccl_log("p4d_2node_all_reduce"), Section((), 0), 70.2, 1200, "", (1, 8))
    with pytest.raises(OSError, match="No space left on device"):
        write_report(tmp_path / "out", report(passed))
    # Half-way, the report is only in a hidden directory beside where it goes; after the failure, not at all.
    assert [name.split("-")[0] for name in seen_while_writing] == [".out.partial"]
    assert list(tmp_path.iterdir()) == []


def test_an_empty_report_directory_is_replaced_by_the_report(tmp_path):
    (tmp_path / "out").mkdir()
    write_report(tmp_path / "out", report(nccl_not_run("no node is ready for jobs")))
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["acceptance.json", "acceptance.txt"]
