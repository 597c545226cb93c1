"""`gpufleet acceptance`: the command texts run by the real sh with the real node scripts against stub node tools
(tests/scripts/ops/conftest.py), the SSM side on botocore clients checked against the ssm model, and the command on
moto's fleet."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.ops.acceptance import nccl_execution_seconds, nccl_script, node_checks_script, run_on_nodes
from gpufleet.reports.acceptance import Section, health_check, nccl_result, split_sections
from tests.gpufleet.ops.conftest import fleet_nodes, make_on_demand, mark_readiness
from tests.gpufleet.ops.test_runs import FakeSsm, modelled_fleet
from tests.scripts.ops.conftest import HEALTHY, STUBS

REPOSITORY = Path(__file__).parents[3]
FIXTURES = REPOSITORY / "tests" / "fixtures"
FI_INFO_P4D = FIXTURES / "fi_info" / "p4d_multiple_interfaces.txt"
NCCL_2NODE = FIXTURES / "nccl" / "p4d_2node_all_reduce.log"
NODE_ENV = {
    "GPUFLEET_GPU_COUNT": "8",
    "GPUFLEET_EFA_COUNT": "4",
    "GPUFLEET_NVSWITCH": "1",
    "GPUFLEET_GPUDIRECT_RDMA": "1",
    "GPUFLEET_INSTANCE_TYPE": "p4d.24xlarge",
    "GPUFLEET_AMI_PROFILE": "",
}


def test_the_node_checks_run_the_health_check_then_fi_info_between_markers():
    assert node_checks_script(fi_info=True) == "\n".join(
        [
            "exec 2>&1",
            'PATH="$PATH:/opt/amazon/efa/bin"',
            'if [ -r "${GPUFLEET_ROOT:-}/etc/gpufleet/node.env" ]; then '
            '. "${GPUFLEET_ROOT:-}/etc/gpufleet/node.env"; fi',
            'echo "gpufleet-acceptance: health begin"',
            "status=0",
            'timeout 300 "${GPUFLEET_ROOT:-}/opt/gpufleet/ops/node-health-check.sh" || status=$?',
            'echo "gpufleet-acceptance: health exit $status"',
            'echo "gpufleet-acceptance: fi_info begin"',
            "status=0",
            "timeout 60 fi_info -p efa -t FI_EP_RDM || status=$?",
            'echo "gpufleet-acceptance: fi_info exit $status"',
        ]
    )
    assert "fi_info" not in node_checks_script(fi_info=False)


def fake_node(tmp_path: Path, node_env: dict[str, str] | None = NODE_ENV, **stubs: str) -> dict[str, str]:
    """A node under GPUFLEET_ROOT: the real operator scripts where operator-scripts.sh installs them, node.env
    (export lines, as the user data writes it), the image's versions manifest, and the stub node tools of the ops
    scripts' tests first on PATH, fi_info printing AWS's documented p4d output; STUBS replace stubs by name."""
    root = tmp_path / "root"
    ops = root / "opt" / "gpufleet" / "ops"
    ops.mkdir(parents=True)
    for script in ("node-health-check.sh", "run-nccl-tests.sh"):
        (ops / script).symlink_to(REPOSITORY / "scripts" / "ops" / script)
    settings = root / "etc" / "gpufleet"
    settings.mkdir(parents=True)
    if node_env is not None:
        (settings / "node.env").write_text("".join(f"export {name}='{value}'\n" for name, value in node_env.items()))
    (settings / "versions.json").write_text(json.dumps({"profile": "p4d", "components": {"driver": "450.80.02"}}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bodies = {**STUBS, "fi_info": f'echo "fi_info $*" >> "$STUB_LOG"\ncat {FI_INFO_P4D}\n', **stubs}
    for name, body in bodies.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {
        **HEALTHY,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_LOG": str(tmp_path / "calls.log"),
        "STUB_DIR": str(tmp_path),
        "GPUFLEET_ROOT": str(root),
    }


def on_node(script: str, environment: dict[str, str]) -> str:
    """SCRIPT as aws:runShellScript runs it (`sh -c`): its output, after checking that it ended with exit status 0."""
    result = subprocess.run(["sh", "-c", script], env=environment, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    return result.stdout


def test_a_healthy_node_passes_the_health_check_and_shows_its_four_efa_devices(tmp_path):
    output = on_node(node_checks_script(fi_info=True), fake_node(tmp_path))
    sections = split_sections(output)
    assert sections["health"].exit_status == 0
    assert sections["health"].lines[0] == "PASS gpu-count: 8 GPUs visible (expected 8)"
    assert sections["health"].lines[-1] == "node healthy"
    assert sections["fi_info"] == Section(tuple(FI_INFO_P4D.read_text().splitlines()), 0)
    assert "fi_info -p efa -t FI_EP_RDM" in (tmp_path / "calls.log").read_text().splitlines()


def test_a_failing_node_reports_its_failing_checks(tmp_path):
    output = on_node(node_checks_script(fi_info=True), fake_node(tmp_path) | {"STUB_FM_STATE": "inactive"})
    sections = split_sections(output)
    check = health_check(sections["health"], output)
    assert (check.status, check.detail) == (
        "fail",
        "fabric-manager: nvidia-fabricmanager is inactive (NVSwitch needs it active, or CUDA fails with error 802)",
    )


def test_a_node_without_its_settings_fails_the_health_check_with_the_scripts_message(tmp_path):
    output = on_node(node_checks_script(fi_info=False), fake_node(tmp_path, node_env=None))
    check = health_check(split_sections(output)["health"], output)
    assert check.detail == (
        "exit 2: node-health-check: error: GPUFLEET_INSTANCE_TYPE is not set (see the header of "
        "scripts/ops/node-health-check.sh)"
    )


def runuser_stub() -> str:
    """runuser as root runs it for the cluster user: here the command itself, after checking the user."""
    return (
        '[[ "$1 $2 $3" == "-u gpufleet --" ]] || { echo "runuser: unexpected $*" >&2; exit 9; }\nshift 3\nexec "$@"\n'
    )


def test_the_head_runs_nccl_tests_over_the_ready_nodes_and_sends_back_the_table(tmp_path):
    environment = fake_node(tmp_path, runuser=runuser_stub()) | {"STUB_NCCL_OUTPUT": str(NCCL_2NODE)}
    script = nccl_script(["10.40.0.4", "10.40.0.5"], 8, "p4d.24xlarge", "70.2", 1200)

    output = on_node(script, environment)

    sections = split_sections(output)
    log = sections["nccl-log"]
    assert log.exit_status == 0
    # The per-rank and NCCL INFO lines stay on the node; the table comes back whole.
    assert not [line for line in log.lines if line.startswith("#  Rank") or " NCCL INFO " in line]
    result = nccl_result(log, sections["nccl-script"], 70.2, 1200, output, (2, 8))
    assert (result.status, result.detail) == (
        "pass",
        "all_reduce on 2 nodes x 8 GPUs: peak busbw 78.66 GB/s at 2 GiB (floor 70.2 GB/s)",
    )
    # run-nccl-tests.sh's own verdict (gpufleet nccl-report on the node) against the same floor.
    assert sections["nccl-script"].lines[-2].startswith("report nccl-report ")
    assert sections["nccl-script"].lines[-2].endswith(" --min-busbw 70.2")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    launch = [call for call in calls if call.startswith("mpirun --hostfile") and "all_reduce_perf" in call]
    assert len(launch) == 1 and " -n 16 -N 8 " in launch[0]


def test_a_run_past_the_timeout_is_cut_short_and_its_log_still_comes_back(tmp_path):
    environment = fake_node(tmp_path, runuser=runuser_stub())
    stopped = tmp_path / "root" / "opt" / "gpufleet" / "ops" / "run-nccl-tests.sh"
    stopped.unlink()
    stopped.write_text(f'#!/bin/sh\nhead -n 40 {NCCL_2NODE} > "$GPUFLEET_NCCL_LOG"\nsleep 30\n')
    stopped.chmod(0o755)

    output = on_node(nccl_script(["10.40.0.4", "10.40.0.5"], 8, "p4d.24xlarge", "70.2", 1), environment)

    sections = split_sections(output)
    assert sections["nccl-log"].exit_status == 124
    result = nccl_result(sections["nccl-log"], sections["nccl-script"], 70.2, 1, output, (2, 8))
    assert result.problems == (
        "all_reduce: log truncated after 13 rows (no 'Avg bus bandwidth' line)",
        "all_reduce: peak busbw 0.99 GB/s is below --min-busbw 70.2 GB/s",
        "cut short: nccl-tests ran past 1 s (--nccl-timeout)",
    )


class AcceptanceSsm(FakeSsm):
    """FakeSsm that also answers GetCommandInvocation: the node checks' output by node (HEALTHY_OUTPUT by default),
    the nccl-tests command's (recognised by runuser) NCCL_OUTPUT."""

    def __init__(self, node_outputs=None, nccl_output="", **options):
        super().__init__(**options)
        self.node_outputs = node_outputs or {}
        self.nccl_output = nccl_output
        self.texts: dict[str, str] = {}

    def send_command(self, params):
        answer = super().send_command(params)
        if "Command" in answer:
            self.texts[answer["Command"]["CommandId"]] = params["Parameters"]["commands"][0]
        return answer

    def get_command_invocation(self, params):
        nccl = "runuser" in self.texts[params["CommandId"]]
        output = self.nccl_output if nccl else self.node_outputs.get(params["InstanceId"], HEALTHY_OUTPUT)
        return {"CommandId": params["CommandId"], "InstanceId": params["InstanceId"], "StandardOutputContent": output}

    def answers(self):
        return {
            "SendCommand": self.send_command,
            "ListCommandInvocations": self.list_command_invocations,
            "GetCommandInvocation": self.get_command_invocation,
        }


HEALTHY_OUTPUT = (
    "gpufleet-acceptance: health begin\n"
    "PASS gpu-count: 8 GPUs visible (expected 8)\n"
    "node healthy\n"
    "gpufleet-acceptance: health exit 0\n"
    "gpufleet-acceptance: fi_info begin\n" + FI_INFO_P4D.read_text() + "gpufleet-acceptance: fi_info exit 0\n"
)


def nccl_output(log: Path = NCCL_2NODE, status: int = 0) -> str:
    kept = [line for line in log.read_text().splitlines() if not line.startswith("#  Rank ")]
    return "\n".join(
        [
            "gpufleet-acceptance: nccl-log begin",
            *kept,
            f"gpufleet-acceptance: nccl-log exit {status}",
            "gpufleet-acceptance: nccl-script begin",
            "report",
            f"gpufleet-acceptance: nccl-script exit {status}",
        ]
    )


def test_the_node_checks_of_256_nodes_take_6_sendcommands_and_one_read_per_node(monkeypatch):
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)
    fake = AcceptanceSsm()
    ssm, calls = answering_ssm(fake)
    ids = [node.instance_id for node in modelled_fleet(256)]

    results = run_on_nodes(ssm, ids, node_checks_script(fi_info=True), "gpufleet dev acceptance", 420)

    operations = [operation for operation, _ in calls]
    # 256 = 5 x 50 + 6; the invocations are over on the third poll of each command; then one GetCommandInvocation a
    # node, for its whole output.
    assert (operations.count("SendCommand"), operations.count("ListCommandInvocations")) == (6, 18)
    assert operations.count("GetCommandInvocation") == 256
    assert len(calls) == 280
    sent = [params for name, params in calls if name == "SendCommand"]
    assert sent[0]["Parameters"]["executionTimeout"] == ["420"]
    assert sent[0]["TimeoutSeconds"] == 600
    assert all(result.output == HEALTHY_OUTPUT for result in results)


def answering_ssm(fake: AcceptanceSsm):
    from tests.answering import answering_client

    return answering_client("ssm", fake.answers(), region_name="us-east-1")


def test_an_offline_node_is_not_read_and_keeps_its_status(monkeypatch):
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)
    fleet = modelled_fleet(2)
    fake = AcceptanceSsm(undeliverable=[fleet[1].instance_id])
    ssm, calls = answering_ssm(fake)

    first, second = run_on_nodes(ssm, [node.instance_id for node in fleet], "true", "c", 420)

    assert (first.ok, first.output) == (True, HEALTHY_OUTPUT)
    assert (second.status, second.detail, second.output) == ("Failed", "Undeliverable", "")
    assert [params["InstanceId"] for name, params in calls if name == "GetCommandInvocation"] == [fleet[0].instance_id]


def test_ssm_gives_the_nccl_run_its_timeout_and_two_minutes_more():
    assert nccl_execution_seconds(1200) == 1320


@pytest.fixture
def acceptance_ssm(answered, monkeypatch):
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)

    def answer(fake: AcceptanceSsm) -> list[tuple[str, dict[str, Any]]]:
        return answered("ssm", fake.answers())

    return answer


def ready_fleet(spot_fleet, nodes: int = 2) -> tuple[str, list[str]]:
    fleet_id = spot_fleet(nodes)
    ids = fleet_nodes(fleet_id)
    mark_readiness(ids)
    make_on_demand(ids[-1])
    return fleet_id, ids


def test_gpufleet_acceptance_passes_a_healthy_cluster_and_writes_the_report(
    spot_fleet, acceptance_ssm, run_cli, tmp_path
):
    fleet_id, (first, second) = ready_fleet(spot_fleet)
    calls = acceptance_ssm(AcceptanceSsm(nccl_output=nccl_output()))
    report = tmp_path / "report"

    code, out, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(report))

    assert code == 0, err
    # Job order: the on-demand node (the second launched) first.
    assert out.splitlines()[1:] == [
        f"{second} (10.40.0.5) ready: PASS ready",
        f"{second} (10.40.0.5) health: PASS node healthy",
        f"{second} (10.40.0.5) efa: PASS 4 EFA devices (expected 4): efa_0-rdm, efa_1-rdm, efa_2-rdm, efa_3-rdm",
        f"{first} (10.40.0.4) ready: PASS ready",
        f"{first} (10.40.0.4) health: PASS node healthy",
        f"{first} (10.40.0.4) efa: PASS 4 EFA devices (expected 4): efa_0-rdm, efa_1-rdm, efa_2-rdm, efa_3-rdm",
        "nccl: PASS all_reduce on 2 nodes x 8 GPUs: peak busbw 78.66 GB/s at 2 GiB (floor 70.2 GB/s)",
        "verdict: PASS",
    ]
    assert err.splitlines()[0] == "acceptance dev: 2 running nodes, 2 ready: the health check and fi_info on each"
    # The on-demand node is the head: rank 0 of the hostfile, and the one node the nccl-tests command goes to.
    assert err.splitlines()[-2] == (
        f"acceptance dev: nccl: all_reduce_perf on 2 nodes from head {second} (10.40.0.5), at most 1200 s"
    )
    sent = [params for name, params in calls if name == "SendCommand"]
    assert [params["InstanceIds"] for params in sent] == [[second, first], [second]]
    assert [params["Parameters"]["executionTimeout"] for params in sent] == [["420"], ["1320"]]
    nccl_text = sent[1]["Parameters"]["commands"][0]
    assert nccl_text.index("10.40.0.5 slots=8") < nccl_text.index("10.40.0.4 slots=8")
    assert sorted(path.name for path in report.iterdir()) == [
        "acceptance.json",
        "acceptance.txt",
        "busbw.png",
        "nccl.log",
    ]
    document = json.loads((report / "acceptance.json").read_text())
    assert (document["passed"], document["nccl"]["instance_ids"], document["nccl"]["peak_busbw_gbs"]) == (
        True,
        [second, first],
        78.66,
    )


FAILING_HEALTH = (
    "gpufleet-acceptance: health begin\n"
    "PASS gpu-count: 8 GPUs visible (expected 8)\n"
    "FAIL gpu-health: 1 GPU(s) need a reset: reboot the node, then run this check again\n"
    "  GPU 0000:10:1c: reset: Xid 79 x1 since boot (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: RESTART_BM)\n"
    "node unhealthy: GPU reset needed (reboot the node)\n"
    "gpufleet-acceptance: health exit 3\n"
    "gpufleet-acceptance: fi_info begin\n" + FI_INFO_P4D.read_text() + "gpufleet-acceptance: fi_info exit 0\n"
)


def test_gpufleet_acceptance_names_each_failed_check_and_exits_3(spot_fleet, acceptance_ssm, run_cli, tmp_path):
    fleet_id, (first, second, third) = ready_fleet(spot_fleet, 3)
    mark_readiness([second], "not ready: health check failed: gpu-health")
    below_floor = nccl_output(FIXTURES / "nccl" / "p4d_all_reduce_wrong.log", 1)
    calls = acceptance_ssm(AcceptanceSsm(node_outputs={second: FAILING_HEALTH}, nccl_output=below_floor))

    code, out, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(tmp_path / "r"))

    assert code == 3
    assert [line for line in err.splitlines() if not line.startswith("acceptance dev: ")] == [
        f"dev: FAIL {second} (10.40.0.5) ready: not ready: health check failed: gpu-health",
        f"dev: FAIL {second} (10.40.0.5) health: gpu-health: 1 GPU(s) need a reset: reboot the node, then run this "
        "check again",
        "dev: FAIL nccl: all_reduce: 1027 wrong elements; all_reduce: peak busbw 41.36 GB/s is below --min-busbw "
        "70.2 GB/s",
    ]
    assert out.splitlines()[-1] == "verdict: FAIL (3 failed checks)"
    # The node that is not ready is checked but left out of the all_reduce.
    sent = [params for name, params in calls if name == "SendCommand"]
    assert [params["InstanceIds"] for params in sent] == [[third, first, second], [third]]
    nccl_text = sent[1]["Parameters"]["commands"][0]
    assert nccl_text.index("10.40.0.6 slots=8") < nccl_text.index("10.40.0.4 slots=8")
    assert "10.40.0.5 slots=8" not in nccl_text
    document = json.loads((tmp_path / "r" / "acceptance.json").read_text())
    assert [node["passed"] for node in document["nodes"]] == [True, True, False]


def test_an_offline_node_fails_both_its_checks(spot_fleet, acceptance_ssm, run_cli, tmp_path):
    fleet_id, (first, second) = ready_fleet(spot_fleet)
    acceptance_ssm(AcceptanceSsm(undeliverable=[first], nccl_output=nccl_output()))

    code, _, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(tmp_path / "r"))

    assert code == 3
    assert [line for line in err.splitlines() if line.startswith("dev: ")] == [
        f"dev: FAIL {first} (10.40.0.4) health: not run: Undeliverable",
        f"dev: FAIL {first} (10.40.0.4) efa: not run: Undeliverable",
    ]


def test_fewer_ready_nodes_than_min_nodes_fail_the_nccl_check_without_running_it(
    spot_fleet, acceptance_ssm, run_cli, tmp_path
):
    fleet_id = spot_fleet(1)
    (only,) = fleet_nodes(fleet_id)
    mark_readiness([only])
    calls = acceptance_ssm(AcceptanceSsm(nccl_output=nccl_output()))

    code, out, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(tmp_path / "r"))

    assert code == 3
    assert err.splitlines()[-1] == "dev: FAIL nccl: not run: 1 ready node(s), fewer than --min-nodes 2"
    assert [name for name, _ in calls].count("SendCommand") == 1
    # With --min-nodes 1 the all_reduce runs on the one node (NVLink only: its floor is the multi-node one).
    code, out, _ = run_cli(
        "acceptance", "dev", "--fleet-id", fleet_id, "--min-nodes", "1", "--report-dir", str(tmp_path / "one")
    )
    assert code == 0
    assert out.splitlines()[-2].startswith("nccl: PASS all_reduce on 1 nodes x 8 GPUs: ")


def test_no_ready_node_exits_1_with_the_report_naming_each_node(spot_fleet, acceptance_ssm, run_cli, tmp_path):
    fleet_id = spot_fleet(1)
    (only,) = fleet_nodes(fleet_id)
    mark_readiness([only], "booting")
    acceptance_ssm(AcceptanceSsm())

    code, _, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(tmp_path / "r"))

    assert code == 1
    assert [line for line in err.splitlines() if line.startswith("dev: ")] == [
        f"dev: FAIL {only} (10.40.0.4) ready: still booting: its setup has not finished (see `gpufleet status`)",
        "dev: FAIL nccl: not run: no node is ready for jobs",
    ]
    assert json.loads((tmp_path / "r" / "acceptance.json").read_text())["passed"] is False


def test_an_aws_error_exits_1_with_one_line_and_no_report(spot_fleet, acceptance_ssm, run_cli, tmp_path):
    fleet_id, _ = ready_fleet(spot_fleet)
    acceptance_ssm(AcceptanceSsm(denied_after=0))

    code, out, err = run_cli("acceptance", "dev", "--fleet-id", fleet_id, "--report-dir", str(tmp_path / "r"))

    assert (code, out) == (1, "")
    assert err.splitlines()[-1] == (
        "access denied to SendCommand in us-east-1 (AccessDeniedException): grant that action to your IAM role or user"
    )
    # Neither the report nor a partial one (.r.partial-...): only the test's own files.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty-aws-file", "environments"]


@pytest.mark.parametrize("argv", [["--min-nodes", "0"], ["--nccl-timeout", "30"], ["--group-name", "g"]])
def test_bad_options_exit_2_before_any_call(acceptance_ssm, run_cli, argv):
    calls = acceptance_ssm(AcceptanceSsm())
    code, out, err = run_cli("acceptance", "dev", *argv)
    assert (code, out, calls) == (2, "", [])
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_an_unknown_environment_or_a_used_report_directory_exit_2(acceptance_ssm, run_cli, tmp_path):
    calls = acceptance_ssm(AcceptanceSsm())
    code, _, err = run_cli("acceptance", "nope")
    assert code == 2 and "unknown environment 'nope'" in err
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "old.txt").write_text("")
    code, _, err = run_cli("acceptance", "dev", "--report-dir", str(tmp_path / "used"))
    assert (code, err) == (
        2,
        f"--report-dir {tmp_path / 'used'}: exists and is not an empty directory: name a new one\n",
    )
    assert calls == []
