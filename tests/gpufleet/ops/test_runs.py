"""`gpufleet run`'s plan and start: ranks, the node's command text (one call of scripts/ops/start-run.sh with the
run's specification; the script itself is run in tests/scripts/ops/test_start_run.py), the unit's scripts (run by the
real bash), SendCommand batches, and the SSM side on botocore clients checked against its ssm model."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.ops import runs
from gpufleet.ops.fleet import FleetInstance
from gpufleet.ops.runs import (
    LIST_RUNS_SCRIPT,
    NodeResult,
    RunPlan,
    RunSecret,
    WorkdirArchive,
    logs_script,
    new_run_id,
    node_results,
    node_script,
    pack_workdir,
    parse_secrets,
    plan_run,
    plan_torchrun,
    run_description,
    runs_on_nodes,
    start_run,
    start_spec,
    stop_script,
    unit_body,
    upload_workdir,
)
from tests.answering import answering_client, client_error
from tests.gpufleet.ops.conftest import fleet_nodes, make_on_demand, mark_readiness

LAUNCHED = dt.datetime(2026, 11, 26, 20, 0, tzinfo=dt.UTC)
RUN_ID = "20261126-210500-3fa2"
COMMAND_ID = "11111111-2222-3333-4444-{:012d}"


def node(instance_id: str, ip: str, lifecycle: str = "on-demand", minute: int = 0) -> FleetInstance:
    return FleetInstance(
        instance_id,
        lifecycle,
        "us-east-1a",
        "pg",
        ip,
        LAUNCHED + dt.timedelta(minutes=minute),
        "running",
        "ami-1",
        "ready",
    )


def two_node_plan(**options: str) -> RunPlan:
    nodes = [node("i-0000000000000000b", "10.40.0.9", "spot"), node("i-0000000000000000a", "10.40.0.4", minute=5)]
    return plan_run(RUN_ID, "dev", nodes, 8, ["python", "train.py", "--epochs", "2"], **options)


def test_the_run_id_is_the_utc_start_time_and_a_token():
    start = dt.datetime(2026, 11, 26, 22, 5, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert new_run_id(start, "3fa2") == "20261126-210500-3fa2"


def test_a_token_that_would_break_the_unit_name_is_refused():
    with pytest.raises(ValueError, match="not a run id"):
        new_run_id(LAUNCHED, "a b;")


def test_the_on_demand_node_is_rank_0_and_the_head_even_when_launched_later():
    plan = two_node_plan()
    assert plan.instance_ids == ["i-0000000000000000a", "i-0000000000000000b"]
    assert plan.head_address == "10.40.0.4"
    assert plan.comment == "gpufleet dev run 20261126-210500-3fa2"


def test_a_run_without_ready_nodes_or_command_is_refused_with_what_to_do():
    with pytest.raises(GpufleetError, match=r"^dev has no node ready for jobs: see `gpufleet status dev`$"):
        plan_run(RUN_ID, "dev", [], 8, ["true"])
    with pytest.raises(GpufleetError, match="no command: put it after --"):
        plan_run(RUN_ID, "dev", [node("i-0000000000000000a", "10.40.0.4")], 8, [])


START_LINE = re.compile(r". /etc/gpufleet/node\.env && /opt/gpufleet/ops/start-run\.sh '([A-Za-z0-9+/]+={0,2})'")


def sent_spec(text: str) -> dict[str, Any]:
    """The specification a start's text carries: the text must be exactly one call of start-run.sh with one quoted
    base64 word."""
    match = START_LINE.fullmatch(text)
    assert match, text
    return json.loads(base64.b64decode(match[1], validate=True))


EFA_LINE = "if [ -r /etc/profile.d/gpufleet-efa.sh ]; then . /etc/profile.d/gpufleet-efa.sh; fi\n"
# The image's virtualenv first on PATH (gpufleet/ops/runs.py PYTHON_VENV_STEP), right after it.
EFA_LINE += 'if [ -n "${GPUFLEET_PYTHON_VENV:-}" ]; then export PATH="$GPUFLEET_PYTHON_VENV/bin:$PATH"; fi\n'


def test_the_start_is_one_line_calling_start_run_with_the_runs_specification():
    plan = two_node_plan(setup="pip install -r requirements.txt", workdir="/fsx/runs/r1")
    text = node_script(plan)
    assert "\n" not in text
    assert sent_spec(text) == {
        "run_id": "20261126-210500-3fa2",
        "first_rank": 0,
        "nodes": ["i-0000000000000000a", "i-0000000000000000b"],
        "node_count": 2,
        "settings": {
            "GPUFLEET_RUN_ID": "20261126-210500-3fa2",
            "GPUFLEET_NODE_COUNT": "2",
            "GPUFLEET_GPUS_PER_NODE": "8",
            "GPUFLEET_HEAD_ADDRESS": "10.40.0.4",
        },
        "body": "set -eo pipefail\n" + EFA_LINE + "cd /fsx/runs/r1\npip install -r requirements.txt\n"
        "exec python train.py --epochs 2",
    }
    # Compact JSON, in insertion order: the text is what a reader of SSM's command history sees.
    assert text.endswith(
        "'" + base64.b64encode(json.dumps(start_spec(plan), separators=(",", ":")).encode()).decode() + "'"
    )


def test_every_dollar_percent_and_quote_of_the_run_reaches_the_specification_unchanged(tmp_path):
    """The specification is one base64 word: sh gives start-run.sh the same bytes, whatever the setup and command
    hold (the script writes them to the unit's file byte for byte: tests/scripts/ops/test_start_run.py)."""
    setup = """echo "${HOME} $$ $HOSTNAME" '%n %% %i' `id -u` $(date) \\ "it's" ; exit"""
    plan = two_node_plan(setup=setup)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "start-run.sh").write_text(f'#!/bin/sh\nprintf %s "$1" > {tmp_path}/argument\n')
    (bin_dir / "start-run.sh").chmod(0o755)
    (tmp_path / "node.env").write_text("")
    text = node_script(plan).replace("/etc/gpufleet/node.env", str(tmp_path / "node.env"))
    text = text.replace("/opt/gpufleet/ops/start-run.sh", str(bin_dir / "start-run.sh"))
    subprocess.run(["sh", "-c", text], check=True)
    spec = json.loads(base64.b64decode((tmp_path / "argument").read_text()))
    assert spec["body"] == unit_body(plan)
    assert f"\n{setup}\n" in spec["body"]


def modelled_fleet(count: int) -> list[FleetInstance]:
    return [
        node(f"i-{n:017x}", f"10.40.{n // 250}.{n % 250 + 4}", "spot" if n % 2 else "on-demand") for n in range(count)
    ]


class FakeSsm:
    """Answers SendCommand and ListCommandInvocations as Run Command does: each command's invocations move from
    Pending to InProgress to a result, one step per ListCommandInvocations; UNDELIVERABLE nodes end as SSM ends a node
    whose agent is offline (Status Failed, StatusDetails Undeliverable, in the documented meaning: "The node might
    not exist or might not be responding")."""

    def __init__(self, undeliverable=(), timed_out=(), unmanaged=(), outputs=None, denied_after=None, not_delivered=()):
        self.undeliverable, self.timed_out, self.unmanaged = set(undeliverable), set(timed_out), set(unmanaged)
        # Nodes whose agent stays away past SendCommand's TimeoutSeconds: StatusDetails DeliveryTimedOut ("The
        # command wasn't delivered to the managed node before the delivery timeout expired"), with Status TimedOut
        # (the pairing is (unconfirmed); the code reads only whether Status is final).
        self.not_delivered = set(not_delivered)
        self.outputs = outputs or {}  # instance id -> what its command prints
        self.denied_after = denied_after  # SendCommand answers AccessDenied once this many commands were sent
        self.commands: dict[str, list[str]] = {}
        self.polls: dict[str, int] = {}

    def send_command(self, params):
        if self.denied_after is not None and len(self.commands) >= self.denied_after:
            return client_error("AccessDeniedException", "not authorized to perform: ssm:SendCommand")
        if self.unmanaged & set(params["InstanceIds"]):
            return client_error("InvalidInstanceId", "Instances not in a valid state for account")
        command_id = COMMAND_ID.format(len(self.commands))
        self.commands[command_id] = list(params["InstanceIds"])
        self.polls[command_id] = 0
        return {"Command": {"CommandId": command_id, "InstanceIds": params["InstanceIds"]}}

    def result(self, instance_id: str, step: int) -> tuple[str, str, str]:
        if step == 0:
            return "Pending", "Pending", ""
        if step == 1:
            return "InProgress", "InProgress", ""
        if instance_id in self.undeliverable:
            return "Failed", "Undeliverable", ""
        if instance_id in self.not_delivered:
            return "TimedOut", "DeliveryTimedOut", ""
        if instance_id in self.timed_out:
            return "TimedOut", "ExecutionTimedOut", "Job for gpufleet-run-x.service failed\n"
        return "Success", "Success", self.outputs.get(instance_id, f"started on {instance_id}\n")

    def list_command_invocations(self, params):
        command_id = params["CommandId"]
        step = self.polls[command_id]
        self.polls[command_id] += 1
        invocations = []
        for instance_id in self.commands[command_id]:
            status, detail, output = self.result(instance_id, step)
            plugin = {"Name": "aws:runShellScript", "Status": status, "Output": output}
            invocations.append(
                {
                    "CommandId": command_id,
                    "InstanceId": instance_id,
                    "Status": status,
                    "StatusDetails": detail,
                    "CommandPlugins": [plugin],
                }
            )
        return {"CommandInvocations": invocations}


def ssm_client(fake: FakeSsm):
    return answering_client(
        "ssm",
        {"SendCommand": fake.send_command, "ListCommandInvocations": fake.list_command_invocations},
        region_name="us-east-1",
    )


def start(fleet, fake, wait_seconds=60.0):
    plan = plan_run(RUN_ID, "dev", fleet, 8, ["python", "train.py"])
    ssm, calls = ssm_client(fake)
    commands, refused = start_run(ssm, plan)
    heard: list[str] = []
    results = node_results(
        ssm, commands, wait_seconds, progress=lambda started: heard.append(started.line()), sleep=lambda _: None
    )
    return refused + results, calls, heard


def test_a_256_node_run_takes_6_sendcommands_and_6_listings_per_poll():
    results, calls, heard = start(modelled_fleet(256), FakeSsm())
    operations = [operation for operation, _ in calls]
    # 256 = 5 x 50 + 6: six SendCommand calls; the invocations are over on the third poll of each command.
    assert operations.count("SendCommand") == 6
    assert operations.count("ListCommandInvocations") == 18
    assert len(calls) == 24
    assert [len(params["InstanceIds"]) for name, params in calls if name == "SendCommand"] == [50, 50, 50, 50, 50, 6]
    assert all(result.ok for result in results) and len(results) == 256
    assert len(heard) == 256


def test_each_sendcommand_carries_its_own_batchs_ranks_and_the_start_timeouts():
    _, calls, _ = start(modelled_fleet(60), FakeSsm())
    sent = [params for name, params in calls if name == "SendCommand"]
    assert sent[0]["DocumentName"] == "AWS-RunShellScript"
    assert sent[0]["TimeoutSeconds"] == 600
    assert sent[0]["Parameters"]["executionTimeout"] == ["120"]
    assert sent[0]["Comment"] == "gpufleet dev run 20261126-210500-3fa2"
    # Job order: the 30 on-demand nodes (even numbers) are ranks 0-29, the spot ones (odd) 30-59; the second batch
    # is ranks 50-59, spot nodes 41 (0x29) to 59 (0x3b). Its text lists those ten only, so a text's size does not
    # grow with the cluster (start-run.sh finds rank 59 in it: tests/scripts/ops/test_start_run.py).
    first, second = (sent_spec(params["Parameters"]["commands"][0]) for params in sent)
    assert (second["first_rank"], second["node_count"]) == (50, 60)
    assert second["nodes"] == [f"i-{n:017x}" for n in range(41, 60, 2)]
    assert "i-0000000000000003b" not in first["nodes"] and len(first["nodes"]) == 50
    assert len(sent[0]["Parameters"]["commands"][0]) < 3000


def test_an_offline_node_and_a_timed_out_start_are_reported_and_the_others_start():
    fleet = modelled_fleet(4)
    offline, slow, away = fleet[1].instance_id, fleet[2].instance_id, fleet[3].instance_id
    results, _, _ = start(fleet, FakeSsm(undeliverable=[offline], timed_out=[slow], not_delivered=[away]))
    assert [result.line() for result in results] == [
        "i-00000000000000000: started",
        "i-00000000000000002: not started (ExecutionTimedOut): Job for gpufleet-run-x.service failed",
        "i-00000000000000001: not started (Undeliverable)",
        "i-00000000000000003: not started (DeliveryTimedOut)",
    ]


def test_a_batch_ssm_refuses_is_reported_node_by_node_and_the_other_batches_go_on():
    fleet = modelled_fleet(51)
    # Job order puts the 26 on-demand nodes (even numbers) first: the last spot node, i-...31 (49), is rank 50,
    # alone in the second batch.
    unmanaged = "i-00000000000000031"
    results, calls, _ = start(fleet, FakeSsm(unmanaged=[unmanaged]))
    assert [name for name, _ in calls].count("SendCommand") == 2
    refused = [result for result in results if not result.ok]
    assert [result.line() for result in refused] == [f"{unmanaged}: not started (InvalidInstanceId)"]
    assert sum(result.ok for result in results) == 50


def test_a_node_ssm_refuses_in_a_batch_no_longer_keeps_the_start_from_the_other_49():
    """SSM refuses the whole call for one node it does not manage (FakeSsm's unmanaged, the answer users report):
    the batch is split down to that node, and every other node of it starts with its batch's own text, so its rank
    stays (start-run.sh finds it in the batch's nodes)."""
    fleet = modelled_fleet(60)
    # Job order: the 30 on-demand nodes (even numbers) are ranks 0-29; rank 7 is node 14 (0x0e).
    unmanaged = "i-0000000000000000e"
    results, calls, _ = start(fleet, FakeSsm(unmanaged=[unmanaged]))
    assert [result.line() for result in results if not result.ok] == [f"{unmanaged}: not started (InvalidInstanceId)"]
    assert sum(result.ok for result in results) == 59
    sent = [params for name, params in calls if name == "SendCommand"]
    # 50 -> 25 -> 13 -> 7 -> 4 -> 2 -> 1 for the first batch (13 calls), one for the second.
    assert len(sent) == 14
    specs = [sent_spec(params["Parameters"]["commands"][0]) for params in sent]
    first_batch = [node.instance_id for node in job_order_of(fleet)][:50]
    assert all((spec["first_rank"], spec["nodes"]) == (0, first_batch) for spec in specs[:13])
    assert (specs[13]["first_rank"], len(specs[13]["nodes"])) == (50, 10)


def job_order_of(fleet: list[FleetInstance]) -> list[FleetInstance]:
    return list(plan_run(RUN_ID, "dev", fleet, 8, ["true"]).nodes)


def test_a_start_still_pending_at_the_deadline_is_reported_with_its_last_status():
    fleet = modelled_fleet(1)
    plan = plan_run(RUN_ID, "dev", fleet, 8, ["true"])
    fake = FakeSsm()
    ssm, _ = ssm_client(fake)
    commands, _ = start_run(ssm, plan)
    moments = iter([0.0, 0.0, 10.0])
    results = node_results(ssm, commands, 5.0, clock=lambda: next(moments), sleep=lambda _: None)
    assert results == [NodeResult("i-00000000000000000", "InProgress", "InProgress", "")]


@pytest.fixture
def answered_ssm(answered, monkeypatch):
    """`gpufleet run`'s SSM client answered by FAKE; no wait between polls."""
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)

    def answer(fake: FakeSsm) -> list[tuple[str, dict[str, Any]]]:
        return answered(
            "ssm", {"SendCommand": fake.send_command, "ListCommandInvocations": fake.list_command_invocations}
        )

    return answer


def test_gpufleet_run_starts_on_every_ready_node_head_on_demand(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    mark_readiness([first, second, third])
    make_on_demand(third)
    calls = answered_ssm(FakeSsm())

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--setup", "make", "--", "python", "train.py")

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert re.fullmatch(rf"run [0-9]{{8}}-[0-9]{{6}}-[0-9a-f]{{4}}: 3 nodes, head {third} \(10\.40\.0\.6\)", lines[0])
    assert lines[1:4] == [f"{third}: started", f"{first}: started", f"{second}: started"]
    assert re.fullmatch(r"run \S+: started on 3 of 3 nodes \(unit gpufleet-run-\S+\)", lines[4])
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    assert sent["InstanceIds"] == [third, first, second]
    spec = sent_spec(sent["Parameters"]["commands"][0])
    assert spec["settings"]["GPUFLEET_HEAD_ADDRESS"] == "10.40.0.6"
    assert spec["body"].endswith("\nmake\nexec python train.py")


def test_gpufleet_run_names_each_node_that_did_not_start_and_exits_3(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first, second])
    answered_ssm(FakeSsm(undeliverable=[second]))

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--", "true")

    assert code == 3
    assert (
        err.splitlines()[0] == f"warning: no ready on-demand node: the head is spot node {first}, which EC2 can reclaim"
    )
    assert re.fullmatch(rf"dev: run \S+: {second}: not started \(Undeliverable\)", err.splitlines()[1])
    assert re.fullmatch(r"run \S+: started on 1 of 2 nodes \(unit gpufleet-run-\S+\)", out.splitlines()[-1])


def test_gpufleet_run_starts_beside_a_node_ssm_refuses_and_names_it(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first, second])
    calls = answered_ssm(FakeSsm(unmanaged=[second]))

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--", "true")

    assert code == 3
    assert re.fullmatch(rf"dev: run \S+: {second}: not started \(InvalidInstanceId\)", err.splitlines()[1])
    assert out.splitlines()[1] == f"{first}: started"
    assert re.fullmatch(r"run \S+: started on 1 of 2 nodes \(unit gpufleet-run-\S+\)", out.splitlines()[-1])
    assert [params["InstanceIds"] for name, params in calls if name == "SendCommand"] == [
        [first, second],
        [first],
        [second],
    ]


def test_gpufleet_run_mpi_sends_the_start_to_the_head_only(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first, second])
    calls = answered_ssm(FakeSsm())

    code, out, _ = run_cli("run", "dev", "--fleet-id", fleet_id, "--mpi", "--", "all_reduce_perf")

    assert code == 0
    assert out.splitlines()[1] == f"{first}: started"
    assert re.fullmatch(r"run \S+: started on 1 of 1 nodes \(unit gpufleet-run-\S+\)", out.splitlines()[2])
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    assert sent["InstanceIds"] == [first]
    # The hostfile in the head's unit lists both nodes.
    body = sent_spec(sent["Parameters"]["commands"][0])["body"]
    assert "printf '%s\\n' '10.40.0.4 slots=8' '10.40.0.5 slots=8' > \"$hostfile\"\n" in body


def test_gpufleet_run_without_a_ready_node_sends_nothing(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(1)
    calls = answered_ssm(FakeSsm())

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--", "true")

    assert (code, out, calls) == (1, "", [])
    assert err == "dev has no node ready for jobs: see `gpufleet status dev`\n"


@pytest.mark.parametrize(
    ("argv", "setup", "command"),
    [
        (
            ["dev", "--setup", "make", "--", "python", "-u", "t.py", "--", "x"],
            "make",
            ["python", "-u", "t.py", "--", "x"],
        ),
        (["--setup", "make", "dev", "--", "python", "t.py", "--", "x"], "make", ["python", "t.py", "--", "x"]),
        (["dev", "--", "python", "t.py"], "", ["python", "t.py"]),
        (["dev", "--setup", "make"], "make", []),
    ],
    ids=["options-after-env", "options-before-env", "no-options", "no-command"],
)
def test_the_command_is_what_follows_the_first_double_dash_after_the_options(argv, setup, command):
    from gpufleet.cli import build_parser
    from gpufleet.commands.run import split_command

    args = build_parser().parse_args(["run", *argv])
    assert (split_command(args), args.setup, args.env) == (command, setup, "dev")


def test_stop_is_one_line_calling_stop_run_with_the_run_id():
    """The node script marks a described run stopped where the node has shared storage (its node.env) and stops the
    unit: tests/scripts/ops/test_start_run.py."""
    assert stop_script(RUN_ID) == ". /etc/gpufleet/node.env && /opt/gpufleet/ops/stop-run.sh 20261126-210500-3fa2"
    with pytest.raises(ValueError, match="not a run id"):
        stop_script("x; reboot")


def test_the_runs_listing_reads_systemctls_columns_on_a_real_sh(tmp_path):
    """LIST_RUNS_SCRIPT against a fake systemctl printing what `systemctl list-units --all --plain` prints."""
    listing = (
        "  UNIT                                        LOAD   ACTIVE SUB     DESCRIPTION\n"
        "  gpufleet-run-20261126-210500-3fa2.service loaded active running gpufleet run 20261126-210500-3fa2\n"
        "  gpufleet-run-20261125-080000-0001.service loaded failed failed  gpufleet run 20261125-080000-0001\n"
        "\n"
        "LOAD   = Reflects whether the unit definition was properly loaded.\n"
        "2 loaded units listed.\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\ncat <<'LIST'\n{listing}LIST\n")
    (bin_dir / "systemctl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    output = subprocess.run(["sh", "-c", LIST_RUNS_SCRIPT], env=env, capture_output=True, text=True, check=True).stdout
    assert output == (
        "gpufleet-run-20261126-210500-3fa2.service active running\n"
        "gpufleet-run-20261125-080000-0001.service failed failed\n"
    )
    answers = [
        NodeResult("i-0000000000000000a", "Success", "Success", output),
        NodeResult("i-0000000000000000b", "Success", "Success", output.splitlines()[0] + "\n"),
        NodeResult("i-0000000000000000c", "Failed", "Undeliverable"),
    ]
    assert runs_on_nodes(answers) == {
        "20261125-080000-0001": {"i-0000000000000000a": "failed/failed"},
        "20261126-210500-3fa2": {"i-0000000000000000a": "active/running", "i-0000000000000000b": "active/running"},
    }


def test_gpufleet_runs_counts_each_runs_unit_states_and_names_a_silent_node(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    running = "gpufleet-run-20261126-210500-3fa2.service active running\n"
    failed = "gpufleet-run-20261125-080000-0001.service failed failed\n"
    calls = answered_ssm(FakeSsm(undeliverable=[third], outputs={first: running + failed, second: running}))

    code, out, err = run_cli("runs", "dev", "--fleet-id", fleet_id)

    assert code == 3
    assert out == "20261125-080000-0001: 1 failed/failed\n20261126-210500-3fa2: 2 active/running\n"
    assert err == f"dev: {third}: not answered (Undeliverable)\n"
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    # Every running node is asked, ready or not: a run outlives its nodes' readiness.
    assert sorted(sent["InstanceIds"]) == sorted([first, second, third])
    assert sent["Comment"] == "gpufleet dev runs"


def test_gpufleet_stop_stops_the_unit_on_every_running_node(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    stopped = f"stop-run: run {RUN_ID}: stopped\n"
    warned = "\n----------ERROR-------\nstop-run: warning: run ...: could not mark it stopped ..."
    calls = answered_ssm(FakeSsm(outputs={first: stopped + warned, second: f"stop-run: run {RUN_ID}: not running\n"}))

    code, out, err = run_cli("stop", "dev", RUN_ID, "--fleet-id", fleet_id)

    assert (code, out, err) == (0, "run 20261126-210500-3fa2: stopped on 1 nodes, not running on 1\n", "")
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    assert sent["Parameters"]["commands"] == [stop_script(RUN_ID)]
    assert sent["Comment"] == "gpufleet dev stop 20261126-210500-3fa2"


def test_gpufleet_stop_stops_beside_a_node_ssm_refuses_and_names_it(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    stopped = f"stop-run: run {RUN_ID}: stopped\n"
    answered_ssm(FakeSsm(unmanaged=[second], outputs={first: stopped, third: stopped}))

    code, out, err = run_cli("stop", "dev", RUN_ID, "--fleet-id", fleet_id)

    assert (code, out) == (3, "run 20261126-210500-3fa2: stopped on 2 nodes, not running on 0\n")
    assert err == f"dev: {second}: not stopped (InvalidInstanceId)\n"


def test_gpufleet_stop_refuses_what_is_not_a_run_id(answered_ssm, run_cli) -> None:
    calls = answered_ssm(FakeSsm())
    code, out, err = run_cli("stop", "dev", "x; reboot")
    assert (code, out, calls) == (1, "", [])
    assert err == "RUN: 'x; reboot' is not a run id (such as 20261126-210500-3fa2): see `gpufleet runs`\n"


def test_logs_script_prints_only_on_the_node_of_the_rank(tmp_path):
    assert logs_script(RUN_ID, 1, 50) == (
        'if [ ! -r "${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks/20261126-210500-3fa2" ] || '
        '[ "$(cat "${GPUFLEET_ROOT:-}/var/lib/gpufleet/run-ranks/20261126-210500-3fa2")" != 1 ]; then exit 0; fi\n'
        'echo "gpufleet logs: run 20261126-210500-3fa2 rank 1"\n'
        "journalctl --unit=gpufleet-run-20261126-210500-3fa2 --output=cat --no-pager --show-cursor --lines=50 | "
        "tail -c 20000"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "journalctl").write_text('#!/bin/sh\necho "$*"\necho "step 10 loss 0.5"\n')
    (bin_dir / "journalctl").chmod(0o755)
    ranks = tmp_path / "var/lib/gpufleet/run-ranks"
    ranks.mkdir(parents=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUFLEET_ROOT": str(tmp_path)}

    def on_node(rank: str | None) -> str:
        if rank is not None:
            (ranks / RUN_ID).write_text(f"{rank}\n")
        command = ["sh", "-c", logs_script(RUN_ID, 1, 50)]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout

    assert on_node(None) == ""
    assert on_node("0") == ""
    assert on_node("1") == (
        "gpufleet logs: run 20261126-210500-3fa2 rank 1\n"
        "--unit=gpufleet-run-20261126-210500-3fa2 --output=cat --no-pager --show-cursor --lines=50\n"
        "step 10 loss 0.5\n"
    )


def test_gpufleet_logs_prints_the_journal_of_the_node_of_the_rank(spot_fleet, answered, monkeypatch, run_cli):
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    marker = "gpufleet logs: run 20261126-210500-3fa2 rank 1\n"
    fake = FakeSsm(outputs={first: "", second: marker + "step 1 loss 2.0\n"})

    def invocation(params: dict[str, Any]) -> dict[str, Any]:
        assert params["InstanceId"] == second
        return {
            "CommandId": params["CommandId"],
            "InstanceId": second,
            "StandardOutputContent": marker + "step 1\nstep 2\n",
        }

    calls = answered(
        "ssm",
        {
            "SendCommand": fake.send_command,
            "ListCommandInvocations": fake.list_command_invocations,
            "GetCommandInvocation": invocation,
        },
    )

    code, out, err = run_cli("logs", "dev", RUN_ID, "--node", "1", "--fleet-id", fleet_id, "--lines", "50")

    assert (code, out, err) == (0, "step 1\nstep 2\n", "")
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    assert sent["Parameters"]["commands"] == [logs_script(RUN_ID, 1, 50)]


def test_gpufleet_logs_says_when_no_node_was_that_rank(spot_fleet, answered_ssm, run_cli):
    fleet_id = spot_fleet(1)
    (only,) = fleet_nodes(fleet_id)
    answered_ssm(FakeSsm(outputs={only: ""}))

    code, out, err = run_cli("logs", "dev", RUN_ID, "--node", "3", "--fleet-id", fleet_id)

    assert (code, out) == (1, "")
    assert err == (
        "no running node was rank 3 of run 20261126-210500-3fa2: check the run id with `gpufleet runs`; a node that "
        "is gone took its journal with it\n"
    )


def test_an_mpi_run_is_started_on_the_head_alone():
    fleet = modelled_fleet(60)
    plan = plan_run(RUN_ID, "dev", fleet, 8, ["all_reduce_perf"], mpi=True)
    ssm, calls = ssm_client(FakeSsm())
    commands, refused = start_run(ssm, plan)
    assert (refused, list(commands.values())) == ([], [["i-00000000000000000"]])
    assert [name for name, _ in calls] == ["SendCommand"]


def test_the_mpi_body_writes_the_hostfile_runs_setup_per_node_then_the_command():
    nodes = [node("i-0000000000000000a", "10.40.0.4"), node("i-0000000000000000b", "10.40.0.9", "spot")]
    plan = plan_run(RUN_ID, "dev", nodes, 8, ["all_reduce_perf", "-b", "8"], setup="make", mpi=True)
    forwarded = (
        "-x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} "
        r"$(env | sed -n 's/^\(\(FI\|NCCL\)_[A-Za-z0-9_]*\)=.*/-x \1/p')"
    )
    mpirun = '/opt/amazon/openmpi/bin/mpirun --hostfile "$hostfile"'
    assert unit_body(plan) == (
        "set -eo pipefail\n"
        "if [ -r /etc/profile.d/gpufleet-efa.sh ]; then . /etc/profile.d/gpufleet-efa.sh; fi\n"
        'if [ -n "${GPUFLEET_PYTHON_VENV:-}" ]; then export PATH="$GPUFLEET_PYTHON_VENV/bin:$PATH"; fi\n'
        "cd ~gpufleet\n"
        "hostfile=$(mktemp)\n"
        "trap 'rm -f \"$hostfile\"' EXIT\n"
        "printf '%s\\n' '10.40.0.4 slots=8' '10.40.0.9 slots=8' > \"$hostfile\"\n"
        f"{mpirun} -n 2 -N 1 --bind-to none --mca pml '^cm,ucx' --mca btl tcp,self {forwarded} "
        "bash -c 'cd ~gpufleet && make'\n"
        f"{mpirun} -n 16 -N 8 --bind-to none --mca pml '^cm,ucx' --mca btl tcp,self {forwarded} all_reduce_perf -b 8"
    )
    assert sent_spec(node_script(plan))["body"] == unit_body(plan)


def test_the_mpi_body_calls_amazons_mpirun_by_its_path_whatever_is_on_path(tmp_path, monkeypatch):
    """The unit's PATH need not hold Amazon's Open MPI (/etc/profile.d reaches login shells only): the body calls it by
    its absolute path, here a stand-in at a path of the test's, with another mpirun first on PATH that must not run.
    The hostfile is a file of mktemp's in TMPDIR, gone when the unit's bash ends."""
    amazon = tmp_path / "opt" / "amazon" / "openmpi" / "bin"
    amazon.mkdir(parents=True)
    (amazon / "mpirun").write_text('#!/bin/sh\necho "amazon mpirun $4 $6"\ncat "$2"\necho "hostfile $2"\n')
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "mpirun").write_text("#!/bin/sh\necho decoy\nexit 7\n")
    for path in (amazon / "mpirun", decoy / "mpirun"):
        path.chmod(0o755)
    monkeypatch.setattr(runs, "MPIRUN", str(amazon / "mpirun"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    plan = plan_run(RUN_ID, "dev", [node("i-0000000000000000a", "10.40.0.4")], 2, ["true"], mpi=True, workdir="/")
    env = {**os.environ, "PATH": f"{decoy}:{os.environ['PATH']}", "TMPDIR": str(temporary)}
    run = subprocess.run(["/bin/bash", "-c", unit_body(plan)], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    first, content, hostfile = run.stdout.splitlines()
    assert (first, content) == ("amazon mpirun 2 2", "10.40.0.4 slots=2")
    assert re.fullmatch(rf"hostfile {temporary}/tmp\.[A-Za-z0-9]{{10}}", hostfile)
    assert list(temporary.iterdir()) == []


def test_the_mpi_body_runs_under_real_open_mpi(tmp_path, monkeypatch):
    """The unit body as systemd runs it (`bash FILE`), with Debian's Open MPI on one local node of two slots: the
    setup once, the command twice, with the EFA-style variables forwarded. Debian's mpirun is /usr/bin/mpirun, called
    by that path as the body calls Amazon's (the box in tests/box runs Amazon's layout)."""
    monkeypatch.setattr(runs, "MPIRUN", "/usr/bin/mpirun")
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "127.0.0.1")],
        2,
        ["sh", "-c", 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE $FI_PROVIDER $(pwd)"'],
        setup="echo setup >> setup.log",
        workdir=str(tmp_path),
        mpi=True,
    )
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, **root, "TMPDIR": str(temporary), "FI_PROVIDER": "efa"}
    body = tmp_path / "body.sh"
    body.write_text(unit_body(plan))
    result = subprocess.run(["/bin/bash", str(body)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(result.stdout.splitlines()) == [f"rank 0 of 2 efa {tmp_path}", f"rank 1 of 2 efa {tmp_path}"]
    assert (tmp_path / "setup.log").read_text() == "setup\n"
    assert [path.name for path in temporary.iterdir() if not path.name.startswith("ompi.")] == []


def workdir_tree(directory: Path) -> Path:
    (directory / "src").mkdir(parents=True)
    (directory / "train.py").write_text("print('train')\n")
    (directory / "src" / "model.py").write_text("LAYERS = 2\n")
    return directory


def test_the_workdir_is_uploaded_once_under_the_data_repository_prefix(tmp_path):
    put: list[dict[str, Any]] = []
    s3, calls = answering_client("s3", {"PutObject": lambda params: put.append(params) or {}}, region_name="us-east-1")

    archive = upload_workdir(
        s3, workdir_tree(tmp_path / "code"), ("gpufleet-dev-data", "training/dev"), RUN_ID, region="eu-west-1"
    )

    assert archive == WorkdirArchive(
        "s3://gpufleet-dev-data/training/dev/gpufleet-runs/20261126-210500-3fa2/workdir.tar.gz", "eu-west-1"
    )
    assert [name for name, _ in calls] == ["PutObject"]
    (params,) = put
    assert (params["Bucket"], params["Key"]) == (
        "gpufleet-dev-data",
        "training/dev/gpufleet-runs/20261126-210500-3fa2/workdir.tar.gz",
    )
    archive = tmp_path / "workdir.tar.gz"
    archive.write_bytes(params["Body"])
    listing = subprocess.run(["tar", "-tzf", str(archive)], capture_output=True, text=True, check=True).stdout
    assert listing.split() == ["src/", "src/model.py", "train.py"]


def test_a_workdir_that_is_missing_or_too_large_is_refused_before_any_upload(tmp_path, monkeypatch):
    from gpufleet.ops import runs

    s3, calls = answering_client("s3", {}, region_name="us-east-1")
    with pytest.raises(GpufleetError, match=r"^--workdir: .*/missing is not a directory$"):
        upload_workdir(s3, tmp_path / "missing", ("bucket", "dev"), RUN_ID, region="us-east-1")
    monkeypatch.setattr(runs, "WORKDIR_ARCHIVE_LIMIT_BYTES", 10)
    with pytest.raises(GpufleetError, match=r"packs to 0 MiB, over 0 MiB: keep data on the shared file system"):
        upload_workdir(s3, workdir_tree(tmp_path / "code"), ("bucket", "dev"), RUN_ID, region="us-east-1")
    assert calls == []


def test_each_node_unpacks_the_workdir_then_runs_in_it(tmp_path):
    """The unit body under the real bash, the AWS CLI faked: `aws s3 cp ADDRESS -` prints the archive."""
    archive = tmp_path / "workdir.tar.gz"
    archive.write_bytes(pack_workdir(workdir_tree(tmp_path / "code")))
    env = fake_aws(tmp_path, f'echo "$*" > {tmp_path}/aws.args\ncat {archive}\n')
    node_dir = tmp_path / "node" / "gpufleet-run-x"
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "10.40.0.4")],
        8,
        ["sh", "-c", "pwd; cat src/model.py"],
        workdir=str(node_dir),
        workdir_archive=WorkdirArchive(
            "s3://gpufleet-dev-data/dev/gpufleet-runs/20261126-210500-3fa2/workdir.tar.gz", "eu-west-1"
        ),
    )
    run = subprocess.run(["/bin/bash", "-c", unit_body(plan)], env=env, capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout) == (0, f"{node_dir}\nLAYERS = 2\n"), run.stderr
    assert (tmp_path / "aws.args").read_text() == (
        "s3 cp --only-show-errors --region eu-west-1 "
        "s3://gpufleet-dev-data/dev/gpufleet-runs/20261126-210500-3fa2/workdir.tar.gz -\n"
    )


def test_a_failed_download_fails_the_unit_before_the_command(tmp_path):
    env = fake_aws(tmp_path, "echo 'fatal error: An error occurred (403)' >&2\nexit 1\n")
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "10.40.0.4")],
        8,
        ["touch", str(tmp_path / "ran")],
        workdir=str(tmp_path / "node"),
        workdir_archive=WorkdirArchive("s3://b/k", "us-east-1"),
    )
    run = subprocess.run(["/bin/bash", "-c", unit_body(plan)], env=env, capture_output=True, text=True, check=False)
    assert run.returncode != 0
    assert "fatal error: An error occurred (403)" in run.stderr
    assert not (tmp_path / "ran").exists()


STORAGE = """\
storage:
  lustre:
    deployment_type: PERSISTENT_2
    storage_capacity_gib: 2400
    throughput_mb_per_tib: 250
  data_repository:
    prefix: training/dev
"""


def test_gpufleet_run_workdir_uploads_once_and_every_node_unpacks_it(
    spot_fleet, answered_ssm, answered, run_cli, tmp_path
):
    environments = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"])
    (environments / "dev.yaml").write_text((environments / "dev.yaml").read_text() + STORAGE)
    fleet_id = spot_fleet(2)
    mark_readiness(fleet_nodes(fleet_id))
    put = answered("s3", {"PutObject": lambda params: {}})
    calls = answered_ssm(FakeSsm())

    code, out, err = run_cli(
        "run",
        "dev",
        "--fleet-id",
        fleet_id,
        "--workdir",
        str(workdir_tree(tmp_path / "code")),
        "--",
        "python",
        "train.py",
    )

    assert (code, err.splitlines()[1:]) == (0, []), err
    run_id = out.split()[1].rstrip(":")
    address = f"s3://gpufleet-dev-123456789012-us-east-1/training/dev/gpufleet-runs/{run_id}/workdir.tar.gz"
    assert out.splitlines()[0] == f"run {run_id}: {tmp_path / 'code'} uploaded to {address}"
    assert [name for name, _ in put] == ["PutObject"]
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    body = sent_spec(sent["Parameters"]["commands"][0])["body"]
    assert (
        f"\naws s3 cp --only-show-errors --region us-east-1 {address} - | tar -xz -C /var/tmp/gpufleet-run-{run_id}\n"
    ) in body


def test_gpufleet_run_workdir_without_a_data_repository_is_refused_before_any_call(answered_ssm, run_cli, tmp_path):
    calls = answered_ssm(FakeSsm())
    code, out, err = run_cli("run", "dev", "--workdir", str(tmp_path), "--", "true")
    assert (code, out, calls) == (1, "", [])
    assert err == (
        "--workdir: dev has no storage.data_repository, the bucket the directory goes through: add one "
        "(docs/guides/storage.md), or put the code on the nodes another way\n"
    )


def test_following_asks_for_the_lines_after_the_cursor_quoted_for_the_shell():
    cursor = "s=739ad463348b4ceca5a9e69c95a3c93f;i=4ece7;b=6c7c6013a8;m=e3f4c4c;t=4f97ad0b5c4d1;x=3f2bdc4e"
    script = logs_script(RUN_ID, 0, 200, cursor)
    assert f"--show-cursor --after-cursor='{cursor}' | tail -c 20000" in script
    assert "--lines" not in script


def test_gpufleet_logs_follow_reads_the_new_lines_from_that_node_alone(spot_fleet, answered, monkeypatch, run_cli):
    from gpufleet.ops import runs

    monkeypatch.setattr(runs, "POLL_SECONDS", 0)
    monkeypatch.setattr(runs, "FOLLOW_SECONDS", 0)
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    marker = "gpufleet logs: run 20261126-210500-3fa2 rank 0\n"
    fake = FakeSsm(outputs={first: "", second: marker, third: ""})
    answers = iter(
        [
            marker + "step 1\n-- cursor: s=a;i=1\n",
            marker + "step 2\nstep 3\n-- cursor: s=a;i=3\n",
            marker,  # nothing new: the cursor stays
            marker + "step 4\n-- cursor: s=a;i=4\n",
        ]
    )

    def invocation(params: dict[str, Any]) -> dict[str, Any]:
        try:
            output = next(answers)
        except StopIteration:
            raise KeyboardInterrupt from None  # the user's Ctrl-C
        return {"CommandId": params["CommandId"], "InstanceId": second, "StandardOutputContent": output}

    ssm_answers = {
        "SendCommand": fake.send_command,
        "ListCommandInvocations": fake.list_command_invocations,
        "GetCommandInvocation": invocation,
    }
    calls = answered("ssm", ssm_answers)

    code, out, _ = run_cli("logs", "dev", RUN_ID, "--follow", "--fleet-id", fleet_id)

    assert (code, out) == (130, "step 1\nstep 2\nstep 3\nstep 4\n")
    sent = [params for name, params in calls if name == "SendCommand"]
    # The fifth round's answer never comes: Ctrl-C.
    assert [params["InstanceIds"] for params in sent] == [[first, second, third]] + [[second]] * 4
    assert [params["Parameters"]["commands"][0].split("--show-cursor ")[1].split(" |")[0] for params in sent] == [
        "--lines=200",
        "--after-cursor='s=a;i=1'",
        "--after-cursor='s=a;i=3'",
        "--after-cursor='s=a;i=3'",
        "--after-cursor='s=a;i=4'",
    ]


def test_a_refused_sendcommand_fails_the_run_only_when_nothing_went_out(spot_fleet, answered_ssm, run_cli):
    fleet_id = spot_fleet(1)
    mark_readiness(fleet_nodes(fleet_id))
    answered_ssm(FakeSsm(denied_after=0))

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--", "true")

    # Refused before anything went out: one line, exit 1, no run reported.
    assert (code, err.splitlines()[-1]) == (
        1,
        "access denied to SendCommand in us-east-1 (AccessDeniedException): grant that action to your IAM role or user",
    )
    assert "started on" not in out
    # Refused after the first batch went out (its nodes run the start): the second batch's nodes are reported.
    fleet = modelled_fleet(51)
    plan = plan_run(RUN_ID, "dev", fleet, 8, ["true"])
    ssm, _ = ssm_client(FakeSsm(denied_after=1))
    commands, refused = start_run(ssm, plan)
    assert len(commands) == 1
    assert [result.line() for result in refused] == ["i-00000000000000031: not started (AccessDeniedException)"]


def test_the_batch_of_rank_0_carries_the_heads_own_script_and_the_others_the_others():
    nodes = [node("i-0000000000000000a", "10.40.0.4"), node("i-0000000000000000b", "10.40.0.9", "spot")]
    plan = plan_run(
        RUN_ID,
        "dev",
        nodes,
        8,
        ["torchrun", "--rdzv_conf=is_host=0", "train.py"],
        head_command=["torchrun", "--rdzv_conf=is_host=1", "train.py"],
    )
    spec = sent_spec(node_script(plan))
    prefix = "set -eo pipefail\n" + EFA_LINE + "cd ~gpufleet\n"
    assert spec["head_body"] == prefix + "exec torchrun --rdzv_conf=is_host=1 train.py"
    assert spec["body"] == prefix + "exec torchrun --rdzv_conf=is_host=0 train.py"
    assert "head_body" not in start_spec(plan, 50)
    assert "head_body" not in start_spec(two_node_plan())  # a plain run: one script for every node


# --torchrun: the plan, the start's text, the description replacement nodes read, the command line.
HEAD_TORCHRUN = (
    "torchrun --nnodes=1:2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=10.40.0.4:29400 "
    "--rdzv_id=20261126-210500-3fa2 --rdzv_conf=is_host=1,last_call_timeout=30 --max_restarts=10 train.py --lr 1"
)
OTHER_TORCHRUN = HEAD_TORCHRUN.replace("is_host=1", "is_host=0")


# The shared caches of a run on an environment with shared storage at /fsx (gpufleet/ops/runs.py cache_steps).
CACHE_LINES = (
    "mkdir -p -m 0750 /fsx/cache\n"
    "export PIP_CACHE_DIR=/fsx/cache/pip UV_CACHE_DIR=/fsx/cache/uv HF_HUB_CACHE=/fsx/cache/huggingface/hub "
    "HF_DATASETS_CACHE=/fsx/cache/huggingface/datasets UV_LINK_MODE=copy\n"
)


def torchrun_plan(**options: Any) -> RunPlan:
    nodes = [node("i-0000000000000000b", "10.40.0.9", "spot"), node("i-0000000000000000a", "10.40.0.4", minute=5)]
    settings = {"min_nodes": 1, "max_restarts": 10, **options}
    return plan_torchrun(RUN_ID, "dev", nodes, 8, ["train.py", "--lr", "1"], **settings)


def test_a_torchrun_run_gives_the_head_the_store_and_every_node_its_gpus():
    plan = torchrun_plan(shared_dir="/fsx")
    assert shlex.join(plan.head_command) == HEAD_TORCHRUN
    assert shlex.join(plan.command) == OTHER_TORCHRUN
    assert (plan.rendezvous_port, plan.joinable) == (29400, True)
    assert torchrun_plan().joinable is False  # no shared storage: nowhere to leave the description


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"min_nodes": 0}, "--min-nodes 0: need 1 to 2 (the nodes ready for jobs now)"),
        ({"min_nodes": 3}, "--min-nodes 3: need 1 to 2 (the nodes ready for jobs now)"),
        ({"max_restarts": -1}, "--max-restarts -1: need 0 or more"),
    ],
    ids=["min-nodes-0", "min-nodes-over-ready", "max-restarts-negative"],
)
def test_a_node_range_or_restart_count_out_of_bounds_is_refused(options, problem):
    with pytest.raises(GpufleetError) as refused:
        torchrun_plan(**options)
    assert str(refused.value) == problem


def test_the_bounds_themselves_are_taken():
    assert "--nnodes=2:2" in torchrun_plan(min_nodes=2, max_restarts=0).command
    assert "--max_restarts=0" in torchrun_plan(min_nodes=1, max_restarts=0).command


def test_a_256_node_torchrun_run_still_takes_6_sendcommands():
    plan = plan_torchrun(RUN_ID, "dev", modelled_fleet(256), 8, ["train.py"], min_nodes=1, max_restarts=10)
    ssm, calls = ssm_client(FakeSsm())
    commands, refused = start_run(ssm, plan)
    assert ([name for name, _ in calls], refused) == (["SendCommand"] * 6, [])
    assert len(commands) == 6
    specs = [sent_spec(params["Parameters"]["commands"][0]) for _, params in calls]
    # The first batch carries both argvs (the head is rank 0 and picks its own), the others the others' alone.
    assert "is_host=1" in specs[0]["head_body"] and "is_host=0" in specs[0]["body"]
    assert all("head_body" not in spec and "is_host=0" in spec["body"] for spec in specs[1:])


def test_the_batch_of_rank_0_of_a_joinable_run_carries_its_description():
    """What rank 0 writes as run.json (start-run.sh, as the cluster user) and join-runs.sh reads."""
    plan = torchrun_plan(shared_dir="/fsx")
    description = {
        "run_id": "20261126-210500-3fa2",
        "environment": "dev",
        "head_address": "10.40.0.4",
        "rendezvous_port": 29400,
        "node_count": 2,
        "command": OTHER_TORCHRUN.split(),
        "setup": "",
        "secrets": {},
        "workdir_archive": "",
        "settings": {
            "GPUFLEET_RUN_ID": "20261126-210500-3fa2",
            "GPUFLEET_NODE_COUNT": "2",
            "GPUFLEET_GPUS_PER_NODE": "8",
            "GPUFLEET_HEAD_ADDRESS": "10.40.0.4",
        },
        "body": "set -eo pipefail\n" + EFA_LINE + CACHE_LINES + f"cd ~gpufleet\nexec {OTHER_TORCHRUN}",
    }
    assert run_description(plan) == description
    assert sent_spec(node_script(plan))["description"] == description
    assert "description" not in start_spec(torchrun_plan())  # no shared storage: nothing to join


@pytest.mark.parametrize("status", [0, 5], ids=["done", "failed"])
def test_the_heads_unit_marks_a_described_run_ended_when_its_torchrun_ends(tmp_path, status):
    """The head's body under the real bash, torchrun faked: the run's end, well or not, is marked beside its
    description, and the unit ends with torchrun's status."""
    shared = tmp_path / "fsx"
    plan = dataclasses.replace(torchrun_plan(shared_dir=str(shared)), workdir=str(tmp_path))
    body = unit_body(plan, head=True)
    assert body.endswith(
        f"status=0\n{HEAD_TORCHRUN} || status=$?\ntouch {shared}/gpufleet-runs/20261126-210500-3fa2/ended\n"
        'exit "$status"'
    )
    assert unit_body(plan).endswith(f"exec {OTHER_TORCHRUN}")  # the others' torchrun marks nothing
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "torchrun").write_text(f"#!/bin/sh\nexit {status}\n")
    (tmp_path / "bin" / "torchrun").chmod(0o755)
    (shared / "gpufleet-runs" / RUN_ID).mkdir(parents=True)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    result = subprocess.run(["/bin/bash", "-c", body], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == status, result.stderr
    assert (shared / "gpufleet-runs" / RUN_ID / "ended").exists()


def test_only_the_first_batch_writes_the_description():
    plan = plan_torchrun(RUN_ID, "dev", modelled_fleet(60), 8, ["t.py"], min_nodes=1, max_restarts=1, shared_dir="/fsx")
    assert sent_spec(node_script(plan, 0))["description"]["node_count"] == 60
    assert "description" not in sent_spec(node_script(plan, 50))


def test_gpufleet_run_torchrun_starts_torchrun_on_every_node_and_warns_without_shared_storage(
    spot_fleet, answered_ssm, run_cli
) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first, second])
    calls = answered_ssm(FakeSsm())

    code, out, err = run_cli(
        "run",
        "dev",
        "--fleet-id",
        fleet_id,
        "--torchrun",
        "--min-nodes",
        "2",
        "--max-restarts",
        "0",
        "--",
        "train.py",
        "--lr",
        "1",
    )

    assert code == 0, err
    assert err.splitlines()[1:] == [
        "warning: dev has no shared storage: a node that becomes ready later does not join this run"
    ]
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    spec = sent_spec(sent["Parameters"]["commands"][0])
    run_id = out.split()[1].rstrip(":")
    torchrun = (
        "torchrun --nnodes=2:2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=10.40.0.4:29400 "
        f"--rdzv_id={run_id} --rdzv_conf=is_host={{}},last_call_timeout=30 --max_restarts=0 train.py --lr 1"
    )
    assert spec["head_body"].endswith(f"\nexec {torchrun.format(1)}")
    assert spec["body"].endswith(f"\nexec {torchrun.format(0)}")
    assert "description" not in spec


def test_gpufleet_run_torchrun_with_shared_storage_describes_the_run_for_replacements(
    spot_fleet, answered_ssm, run_cli
) -> None:
    environments = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"])
    (environments / "dev.yaml").write_text((environments / "dev.yaml").read_text() + STORAGE)
    fleet_id = spot_fleet(2)
    mark_readiness(fleet_nodes(fleet_id))
    calls = answered_ssm(FakeSsm())

    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--torchrun", "--", "train.py")

    assert code == 0, err
    assert "shared storage" not in err
    run_id = out.split()[1].rstrip(":")
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    spec = sent_spec(sent["Parameters"]["commands"][0])
    assert (spec["description"]["run_id"], spec["description"]["head_address"]) == (run_id, "10.40.0.4")
    assert spec["head_body"].endswith(f'\ntouch /fsx/gpufleet-runs/{run_id}/ended\nexit "$status"')
    assert "--nnodes=1:2 " in spec["body"] and "--max_restarts=10 " in spec["body"]  # the defaults


def test_gpufleet_run_refuses_torchrun_with_mpi_before_any_call(answered_ssm, run_cli) -> None:
    calls = answered_ssm(FakeSsm())
    code, out, err = run_cli("run", "dev", "--torchrun", "--mpi", "--", "train.py")
    assert (code, out, err, calls) == (1, "", "--torchrun and --mpi: choose one launcher\n", [])


def test_gpufleet_run_torchrun_refuses_a_minimum_over_the_ready_nodes_before_sending(
    spot_fleet, answered_ssm, run_cli
) -> None:
    fleet_id = spot_fleet(2)
    mark_readiness(fleet_nodes(fleet_id))
    calls = answered_ssm(FakeSsm())
    code, out, err = run_cli("run", "dev", "--fleet-id", fleet_id, "--torchrun", "--min-nodes", "3", "--", "t.py")
    assert (code, out, calls) == (1, "", [])
    assert err == "--min-nodes 3: need 1 to 2 (the nodes ready for jobs now)\n"


def test_gpufleet_stop_sends_the_same_call_with_shared_storage(spot_fleet, answered_ssm, run_cli) -> None:
    """The node reads its shared file system from its own node.env: the text does not depend on the environment."""
    environments = Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"])
    (environments / "dev.yaml").write_text((environments / "dev.yaml").read_text() + STORAGE)
    fleet_id = spot_fleet(1)
    calls = answered_ssm(FakeSsm(outputs={fleet_nodes(fleet_id)[0]: f"stop-run: run {RUN_ID}: stopped\n"}))
    code, out, _ = run_cli("stop", "dev", RUN_ID, "--fleet-id", fleet_id)
    assert (code, out) == (0, "run 20261126-210500-3fa2: stopped on 1 nodes, not running on 0\n")
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    assert sent["Parameters"]["commands"] == [stop_script(RUN_ID)]


# --secret NAME=SECRET_ID (runs.parse_secrets, secret_steps): the reference travels with the run, each node reads the
# value with its node role.
DEV_NAMESPACE_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet-dev/hf-token-AbCdEf"
SECRET_READER_LINE = (
    "gpufleet_secret() { local gpufleet_value gpufleet_error; gpufleet_error=$(mktemp); "
    'if ! gpufleet_value=$(aws secretsmanager get-secret-value --region "$3" --secret-id "$2" '
    '--query SecretString --output text 2>"$gpufleet_error"); then '
    'echo "gpufleet run: --secret $1=$2: cannot read it in $3 with the node role: '
    '$(grep -v \'^$\' "$gpufleet_error" | tail -n 1 | cut -c 1-300)" >&2; rm -f "$gpufleet_error"; exit 1; fi; '
    'rm -f "$gpufleet_error"; export "$1=$gpufleet_value"; }\n'
)


def dev_secrets(*options: str) -> tuple[RunSecret, ...]:
    return parse_secrets(list(options), stack_prefix="gpufleet-dev", region="us-east-1", account="123456789012")


def test_a_secret_is_a_variable_name_and_a_secret_of_the_environments_namespace_or_its_arn():
    assert dev_secrets("HF_TOKEN=gpufleet-dev/hf-token", f"WANDB_API_KEY={DEV_NAMESPACE_ARN}", "_x=gpufleet-dev/a") == (
        RunSecret("HF_TOKEN", "gpufleet-dev/hf-token", "us-east-1"),
        RunSecret("WANDB_API_KEY", DEV_NAMESPACE_ARN, "us-east-1"),
        RunSecret("_x", "gpufleet-dev/a", "us-east-1"),
    )
    assert dev_secrets() == ()
    # Secrets Manager's name characters (botocore's secretsmanager model, CreateSecret Name) and its 512 bound.
    longest = "gpufleet-dev/" + "a" * (512 - len("gpufleet-dev/"))
    assert dev_secrets("A=gpufleet-dev/team/k_+=.@-1", f"B={longest}") == (
        RunSecret("A", "gpufleet-dev/team/k_+=.@-1", "us-east-1"),
        RunSecret("B", longest, "us-east-1"),
    )


NOT_READABLE = (
    "--secret {name}=...: SECRET_ID is not one the nodes may read: a Secrets Manager secret name starting "
    "gpufleet-dev/ (letters, digits and /_+=.@-, at most 512) or its ARN, never the value itself"
)


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("HF_TOKEN", "--secret: expected NAME=SECRET_ID, e.g. --secret HF_TOKEN=gpufleet-dev/hf-token"),
        ("=gpufleet-dev/a", "--secret: expected NAME=SECRET_ID, e.g. --secret HF_TOKEN=gpufleet-dev/hf-token"),
        (
            "1TOKEN=gpufleet-dev/a",
            "--secret 1TOKEN=...: NAME must be a shell variable name (letters, digits and _, not starting with a "
            "digit)",
        ),
        (
            "HF-TOKEN=gpufleet-dev/a",
            "--secret HF-TOKEN=...: NAME must be a shell variable name (letters, digits and _, not starting with a "
            "digit)",
        ),
        ("GPUFLEET_RUN_ID=gpufleet-dev/a", "--secret GPUFLEET_RUN_ID=...: names starting GPUFLEET_ are gpufleet's own"),
        ("gpufleet_value=gpufleet-dev/a", "--secret gpufleet_value=...: names starting GPUFLEET_ are gpufleet's own"),
        ("HF_TOKEN=hf_abcdefghijklmnop", NOT_READABLE.format(name="HF_TOKEN")),  # a value where its name belongs
        ("HF_TOKEN=gpufleet-dev/", NOT_READABLE.format(name="HF_TOKEN")),
        ("HF_TOKEN=gpufleet-dev-2/hf-token", NOT_READABLE.format(name="HF_TOKEN")),  # another environment's
        ("HF_TOKEN=gpufleet-dev-cluster-user-key", NOT_READABLE.format(name="HF_TOKEN")),
        ("HF_TOKEN=gpufleet-dev/a b", NOT_READABLE.format(name="HF_TOKEN")),
        ("HF_TOKEN=gpufleet-dev/" + "a" * (513 - len("gpufleet-dev/")), NOT_READABLE.format(name="HF_TOKEN")),
        (
            "HF_TOKEN=arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet-prod/hf-token-AbCdEf",
            NOT_READABLE.format(name="HF_TOKEN"),
        ),
        (
            "HF_TOKEN=arn:aws:secretsmanager:eu-west-1:123456789012:secret:gpufleet-dev/hf-token-AbCdEf",
            "--secret HF_TOKEN=...: the ARN names region eu-west-1 and account 123456789012: the nodes read secrets of "
            "their own, us-east-1 and 123456789012",
        ),
        (
            "HF_TOKEN=arn:aws:secretsmanager:us-east-1:210987654321:secret:gpufleet-dev/hf-token-AbCdEf",
            "--secret HF_TOKEN=...: the ARN names region us-east-1 and account 210987654321: the nodes read secrets of "
            "their own, us-east-1 and 123456789012",
        ),
    ],
)
def test_a_bad_secret_option_is_refused_with_its_line_and_never_echoes_the_secret_id(option, problem):
    with pytest.raises(GpufleetError) as raised:
        dev_secrets(option)
    assert (raised.value.problems, raised.value.exit_code) == ((problem,), 2)


def test_every_bad_secret_option_is_reported_at_once_and_a_name_given_twice_too():
    with pytest.raises(GpufleetError) as raised:
        dev_secrets("A=gpufleet-dev/a", "A=gpufleet-dev/b", "B=plain-value")
    assert raised.value.problems == ("--secret A=...: A is given twice", NOT_READABLE.format(name="B"))


def test_the_unit_reads_each_secret_after_the_efa_environment_and_before_the_setup():
    plan = two_node_plan(setup="make", secrets=dev_secrets("HF_TOKEN=gpufleet-dev/hf-token", f"W={DEV_NAMESPACE_ARN}"))
    assert unit_body(plan) == (
        "set -eo pipefail\n"
        + EFA_LINE
        + SECRET_READER_LINE
        + "gpufleet_secret HF_TOKEN gpufleet-dev/hf-token us-east-1\n"
        + f"gpufleet_secret W {DEV_NAMESPACE_ARN} us-east-1\n"
        + "cd ~gpufleet\n"
        + "make\n"
        + "exec python train.py --epochs 2"
    )
    assert (
        unit_body(two_node_plan(setup="make"))
        == "set -eo pipefail\n" + EFA_LINE + "cd ~gpufleet\nmake\nexec python train.py --epochs 2"
    )


def fake_aws(directory: Path, script: str) -> dict[str, str]:
    """An environment whose `aws` is SCRIPT (sh), its TMPDIR an empty folder of DIRECTORY's."""
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text("#!/bin/sh\n" + script)
    (bin_dir / "aws").chmod(0o755)
    (directory / "tmp").mkdir()
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(directory / "tmp")}


# A value with what a shell would expand, split or strip, as the AWS CLI prints a SecretString with --output text: the
# string and one newline.
AWKWARD_VALUE = "hf_$HOME `id` $(id) 'q' \"dq\" \\ %n\n second line  "


def test_each_node_reads_the_secret_into_its_variable_unchanged_and_leaves_no_file(tmp_path):
    """The unit body under the real bash, the AWS CLI faked: the call's arguments, and the value exactly as the
    command sees it."""
    (tmp_path / "value").write_text(AWKWARD_VALUE + "\n")
    env = fake_aws(tmp_path, f'printf "%s\\n" "$*" >> {tmp_path}/aws.args\ncat {tmp_path}/value\n')
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "10.40.0.4")],
        8,
        ["sh", "-c", 'printf "%s|" "$HF_TOKEN" "$W"'],
        setup=f'printf "%s" "$HF_TOKEN" > {tmp_path}/seen-by-setup',
        workdir=str(tmp_path),
        secrets=dev_secrets("HF_TOKEN=gpufleet-dev/hf-token", f"W={DEV_NAMESPACE_ARN}"),
    )
    run = subprocess.run(["/bin/bash", "-c", unit_body(plan)], env=env, capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"{AWKWARD_VALUE}|{AWKWARD_VALUE}|", "")
    assert (tmp_path / "seen-by-setup").read_text() == AWKWARD_VALUE
    assert (tmp_path / "aws.args").read_text() == (
        "secretsmanager get-secret-value --region us-east-1 --secret-id gpufleet-dev/hf-token --query SecretString "
        "--output text\n"
        f"secretsmanager get-secret-value --region us-east-1 --secret-id {DEV_NAMESPACE_ARN} --query SecretString "
        "--output text\n"
    )
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_secret_the_node_cannot_read_fails_the_unit_with_one_line_before_the_setup(tmp_path):
    """The AWS CLI's error as it prints it (a blank line, then the error), its exit status 254 (AWS CLI v2's return
    codes: 254, the service returned an error)."""
    env = fake_aws(
        tmp_path,
        "printf '\\nAn error occurred (AccessDeniedException) when calling the GetSecretValue operation: User is "
        "not authorized\\n' >&2\nexit 254\n",
    )
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "10.40.0.4")],
        8,
        ["touch", str(tmp_path / "command-ran")],
        setup=f"touch {tmp_path}/setup-ran",
        workdir=str(tmp_path),
        secrets=dev_secrets("HF_TOKEN=gpufleet-dev/hf-token"),
    )
    run = subprocess.run(["/bin/bash", "-c", unit_body(plan)], env=env, capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout, run.stderr) == (
        1,
        "",
        "gpufleet run: --secret HF_TOKEN=gpufleet-dev/hf-token: cannot read it in us-east-1 with the node role: An "
        "error occurred (AccessDeniedException) when calling the GetSecretValue operation: User is not authorized\n",
    )
    assert not (tmp_path / "setup-ran").exists() and not (tmp_path / "command-ran").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_every_mpi_process_reads_the_secret_on_its_own_node_under_real_open_mpi(tmp_path, monkeypatch):
    """Each process mpirun starts reads the secret itself (the value never crosses mpirun's command line or -x): here
    Debian's Open MPI on one node of two slots, the AWS CLI faked and found through the forwarded PATH."""
    monkeypatch.setattr(runs, "MPIRUN", "/usr/bin/mpirun")
    (tmp_path / "value").write_text(AWKWARD_VALUE + "\n")
    env = fake_aws(tmp_path, f"echo call >> {tmp_path}/aws.calls\ncat {tmp_path}/value\n")
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}
    plan = plan_run(
        RUN_ID,
        "dev",
        [node("i-0000000000000000a", "127.0.0.1")],
        2,
        ["sh", "-c", 'printf "rank %s %s|\\n" "$OMPI_COMM_WORLD_RANK" "$HF_TOKEN"'],
        setup=f'printf "%s" "$HF_TOKEN" > {tmp_path}/seen-by-setup',
        workdir=str(tmp_path),
        mpi=True,
        secrets=dev_secrets("HF_TOKEN=gpufleet-dev/hf-token"),
    )
    body = tmp_path / "body.sh"
    body.write_text(unit_body(plan))
    result = subprocess.run(
        ["/bin/bash", str(body)], env={**env, **root}, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(result.stdout.split("|\n")) == ["", f"rank 0 {AWKWARD_VALUE}", f"rank 1 {AWKWARD_VALUE}"]
    assert (tmp_path / "seen-by-setup").read_text() == AWKWARD_VALUE
    # The head's unit, the setup's one process and the command's two each read it.
    assert (tmp_path / "aws.calls").read_text() == "call\n" * 4
    assert "hf_" not in body.read_text()


def test_only_the_references_travel_with_a_run_and_its_description():
    plan = torchrun_plan(shared_dir="/fsx", secrets=dev_secrets("HF_TOKEN=gpufleet-dev/hf-token"))
    description = run_description(plan)
    assert description["secrets"] == {"HF_TOKEN": "gpufleet-dev/hf-token"}
    assert "gpufleet_secret HF_TOKEN gpufleet-dev/hf-token us-east-1\n" in description["body"]
    spec = sent_spec(node_script(plan))
    assert "gpufleet_secret HF_TOKEN gpufleet-dev/hf-token us-east-1\n" in spec["head_body"]


def test_gpufleet_run_refuses_a_bad_secret_before_any_call(answered_ssm, run_cli) -> None:
    calls = answered_ssm(FakeSsm())
    code, out, err = run_cli("run", "dev", "--secret", "HF_TOKEN=hf_live_value", "--", "train.py")
    assert (code, out, err, calls) == (2, "", NOT_READABLE.format(name="HF_TOKEN") + "\n", [])


def test_gpufleet_run_sends_the_secrets_reference_and_never_a_value(spot_fleet, answered_ssm, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first, second])
    make_on_demand(second)
    calls = answered_ssm(FakeSsm())

    code, _, err = run_cli(
        "run", "dev", "--fleet-id", fleet_id, "--secret", "HF_TOKEN=gpufleet-dev/hf-token", "--", "python", "train.py"
    )

    assert (code, err) == (0, "")
    (sent,) = [params for name, params in calls if name == "SendCommand"]
    body = sent_spec(sent["Parameters"]["commands"][0])["body"]
    assert body.splitlines()[1:5] == [
        *EFA_LINE.rstrip("\n").splitlines(),
        SECRET_READER_LINE.rstrip("\n"),
        "gpufleet_secret HF_TOKEN gpufleet-dev/hf-token us-east-1",
    ]
