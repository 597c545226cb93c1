"""gpufleet.checkpoint_hook: the hook sent to each node through Run Command, and a removal's bounded wait for it, with
an SSM stand-in whose answers follow botocore's model (CommandInvocationStatus, the error codes), and with Run Command
as tests/run_command.py answers it over botocore's HTTP exchange."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.exceptions import ClientError

from gpufleet.aws_faults import client_config
from gpufleet.checkpoint_hook import hook_command, hook_finished, run_hook_and_wait, send_hook
from tests.run_command import UNKNOWN, WHOLE_CALL, Node, RunCommand

SSM_MODEL = botocore.session.get_session().get_service_model("ssm")


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "SendCommand")


class FakeSsm:
    """Each node's invocation answers the statuses listed for it, one per GetCommandInvocation, the last one from then
    on; a node in `refused` fails SendCommand with that code."""

    def __init__(self, statuses: dict[str, list[str]], refused: dict[str, str] | None = None) -> None:
        self.statuses, self.refused, self.sent = statuses, refused or {}, []

    def send_command(self, **arguments):
        (node,) = arguments["InstanceIds"]
        if node in self.refused:
            raise client_error(self.refused[node])
        self.sent.append(arguments)
        return {"Command": {"CommandId": f"command-{node}"}}

    def get_command_invocation(self, CommandId, InstanceId):
        assert CommandId == f"command-{InstanceId}"
        answers = self.statuses[InstanceId]
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        if status == "InvocationDoesNotExist":
            raise client_error(status)
        return {"Status": status}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_command_reads_the_node_settings_then_runs_the_hook_with_the_notice():
    assert hook_command("/etc/gpufleet/node.env", "fleet-teardown", "cdk-destroy") == (
        ". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=fleet-teardown GPUFLEET_NOTICE=cdk-destroy "
        'bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
    )


def test_each_node_gets_its_own_command_and_a_node_ssm_refuses_is_named():
    ssm = FakeSsm({}, refused={"i-2": "InvalidInstanceId"})

    commands, unreachable = send_hook(ssm, ["i-1", "i-2", "i-3"], "the command", "why")

    assert commands == {"i-1": "command-i-1", "i-3": "command-i-3"}
    assert unreachable == ["i-2 (InvalidInstanceId)"]
    assert ssm.sent[0] == {
        "InstanceIds": ["i-1"],
        "DocumentName": "AWS-RunShellScript",
        "Comment": "why",
        "Parameters": {"commands": ["the command"]},
    }


@pytest.mark.parametrize(
    ("status", "finished"),
    [
        ("Pending", False),
        ("InProgress", False),
        ("Delayed", False),
        ("Success", True),
        ("Cancelled", True),
        ("TimedOut", True),
        ("Failed", True),
        ("Cancelling", False),
        ("InvocationDoesNotExist", False),
    ],
)
def test_a_run_is_over_in_the_statuses_that_end_it(status, finished):
    assert set(SSM_MODEL.shape_for("CommandInvocationStatus").enum) == {
        "Pending",
        "InProgress",
        "Delayed",
        "Success",
        "Cancelled",
        "TimedOut",
        "Failed",
        "Cancelling",
    }
    assert hook_finished(FakeSsm({"i-1": [status]}), "command-i-1", "i-1") is finished


def test_another_error_than_a_missing_invocation_is_raised():
    class Denied:
        def get_command_invocation(self, **arguments):
            raise client_error("AccessDeniedException")

    with pytest.raises(ClientError):
        hook_finished(Denied(), "command-i-1", "i-1")


def test_the_wait_ends_when_every_run_is_over():
    clock = Clock()
    ssm = FakeSsm({"i-1": ["InProgress", "Success"], "i-2": ["InvocationDoesNotExist", "InProgress", "Failed"]})

    lines = run_hook_and_wait(ssm, ["i-1", "i-2"], "cmd", "why", wait_seconds=60, clock=clock, sleep=clock.sleep)

    assert lines == ["checkpoint hook over on i-1, i-2"]
    assert clock.now == 10  # two polls of five seconds


def test_the_wait_is_bounded_and_says_which_hooks_still_run():
    clock = Clock()
    ssm = FakeSsm({"i-1": ["Success"], "i-2": ["InProgress"]}, refused={"i-3": "InvalidInstanceId"})

    lines = run_hook_and_wait(ssm, ["i-1", "i-2", "i-3"], "cmd", "why", wait_seconds=12, clock=clock, sleep=clock.sleep)

    assert lines == [
        "checkpoint hook not started on i-3 (InvalidInstanceId)",
        "checkpoint hook still running after 12s on i-2",
    ]
    assert clock.now == 15


def test_no_node_no_call():
    assert run_hook_and_wait(FakeSsm({}), [], "cmd", "why") == []


# The hook as sent to Run Command as botocore's model describes it (tests/run_command.py), under both answers to what
# SSM does with one node it cannot reach among many: the outcome is the same, since the hook goes one node a call.
NODES = ["i-00000000000000001", "i-00000000000000002", "i-00000000000000003", "i-00000000000000004"]


def service(unknown: str, **answers) -> RunCommand:
    """NODES: running, still booting (agent not registered), shutting down, running."""
    nodes = dict(
        zip(
            NODES,
            [Node(), Node(state="pending", registered=False), Node(state="shutting-down"), Node()],
            strict=True,
        )
    )
    return RunCommand(nodes, unknown, **answers)


@pytest.fixture
def no_backoff(monkeypatch):
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_a_node_ssm_cannot_reach_is_named_at_once_under_either_answer(unknown):
    ssm = service(unknown)

    commands, unreachable = send_hook(ssm.client(), NODES, "the command", "why")

    assert sorted(commands) == [NODES[0], NODES[3]]
    assert unreachable == [f"{NODES[1]} (InvalidInstanceId)", f"{NODES[2]} (InvalidInstanceId)"]
    assert ssm.requests == [[node] for node in NODES]
    assert all(ssm.received(node) == [command_id] for node, command_id in commands.items())


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_the_wait_reads_the_hooks_that_started_and_names_the_others(unknown):
    ssm = service(unknown)
    clock = Clock()

    lines = run_hook_and_wait(ssm.client(), NODES, "cmd", "why", wait_seconds=60, clock=clock, sleep=clock.sleep)

    assert lines == [
        f"checkpoint hook not started on {NODES[1]} (InvalidInstanceId)",
        f"checkpoint hook not started on {NODES[2]} (InvalidInstanceId)",
        f"checkpoint hook over on {NODES[0]}, {NODES[3]}",
    ]


def test_throttling_is_retried_and_a_refusal_of_the_call_names_every_node_not_sent(no_backoff):
    ssm = service(WHOLE_CALL, throttled=[1, 2])
    commands, unreachable = send_hook(ssm.client(client_config(4)), [NODES[0], NODES[3]], "cmd", "why")
    assert (sorted(commands), unreachable, len(ssm.requests)) == ([NODES[0], NODES[3]], [], 4)

    ssm = service(WHOLE_CALL, refusal="AccessDeniedException", refused_from=2)
    commands, unreachable = send_hook(ssm.client(), NODES, "cmd", "why")
    assert list(commands) == [NODES[0]]
    assert unreachable == [f"{node} (AccessDeniedException)" for node in NODES[1:]]
    assert ssm.requests == [[NODES[0]], [NODES[1]]]
