"""gpufleet.ssm_batches: SendCommand in batches of 50 that one node cannot silence, against Run Command as botocore's
model describes it (tests/run_command.py), under both answers to what SSM does with one node it cannot reach among
many; and which instance states a command goes to."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.exceptions import ClientError

from gpufleet.aws_faults import client_config
from gpufleet.ssm_batches import NO_COMMAND_BECAUSE, RUNNING, command_targets, send_in_batches
from tests.run_command import SEND_COMMAND_ERRORS, UNKNOWN, WHOLE_CALL, Node, RunCommand

EC2_STATES = botocore.session.get_session().get_service_model("ec2").shape_for("InstanceStateName").enum


def ids(count: int) -> list[str]:
    return [f"i-{n:017x}" for n in range(count)]


def request(first: int) -> dict:
    return {"DocumentName": "AWS-RunShellScript", "Parameters": {"commands": [f"echo batch from {first}"]}}


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    """botocore's waits between retries (standard mode, up to 2 ** try seconds) are not slept."""
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)


def test_every_state_ec2_lists_is_decided_and_only_a_running_node_gets_a_command():
    assert sorted(EC2_STATES) == sorted([*NO_COMMAND_BECAUSE, RUNNING])
    states = {f"i-{n:017x}": state for n, state in enumerate(EC2_STATES)}
    targets, passed_over = command_targets(states)
    assert targets == ["i-00000000000000001"]
    assert passed_over == [
        "i-00000000000000000: no command (pending: still starting, its SSM agent may not be registered yet)",
        "i-00000000000000002: no command (shutting-down: SSM refuses it)",
        "i-00000000000000003: no command (terminated: gone)",
        "i-00000000000000004: no command (stopping: a command would wait for its next start)",
        "i-00000000000000005: no command (stopped: a command would wait for its next start)",
    ]
    assert EC2_STATES == ["pending", "running", "shutting-down", "terminated", "stopping", "stopped"]


def test_a_state_ec2_adds_later_gets_no_command():
    assert command_targets({"i-1": "hibernating", "i-2": "running"}) == (
        ["i-2"],
        ["i-1: no command (hibernating: a state gpufleet does not know)"],
    )


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_a_batch_with_one_unregistered_node_still_reaches_the_other_49(unknown):
    nodes = ids(50)
    booting = nodes[17]
    service = RunCommand({node: Node(registered=node != booting) for node in nodes}, unknown)

    delivery = send_in_batches(service.client(), nodes, request)

    reached = [node for node in nodes if service.received(node)]
    assert all(len(service.received(node)) == 1 for node in reached)
    if unknown == WHOLE_CALL:
        assert delivery.refused == {booting: "InvalidInstanceId"}
        assert reached == [node for node in nodes if node != booting]
        # 50 -> 25 -> 13 -> 7 -> 4 -> 2 -> 1: the first call and two a halving.
        assert len(service.requests) == 13
        assert delivery.refused_lines() == [f"{booting}: SSM refused it (InvalidInstanceId)"]
    else:
        # SSM takes the call; the node's own invocation says it was not delivered.
        assert (delivery.refused, len(service.requests), reached) == ({}, 1, nodes)
        (command_id,) = delivery.commands
        invocation = service.client().get_command_invocation(CommandId=command_id, InstanceId=booting)
        assert (invocation["Status"], invocation["StatusDetails"]) == ("Failed", "Undeliverable")
    assert sorted(node for batch in delivery.commands.values() for node in batch) == sorted(reached)


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_pending_stopping_and_shutting_down_peers_do_not_keep_the_command_from_the_others(unknown):
    nodes = ids(6)
    service = RunCommand(
        {
            nodes[0]: Node(),
            nodes[1]: Node(state="pending", registered=False),  # still booting
            nodes[2]: Node(state="stopping"),
            nodes[3]: Node(state="shutting-down"),
            nodes[4]: Node(state="terminated"),
            nodes[5]: Node(),
        },
        unknown,
    )

    delivery = send_in_batches(service.client(), nodes, request)

    refused = {nodes[1]: "InvalidInstanceId", nodes[3]: "InvalidInstanceId", nodes[4]: "InvalidInstanceId"}
    assert delivery.refused == (refused if unknown == WHOLE_CALL else {})
    assert [bool(service.received(node)) for node in nodes] == (
        [True, False, True, False, False, True] if unknown == WHOLE_CALL else [True] * 6
    )
    # The command itself is the callers' to hold back from such nodes (command_targets).
    assert command_targets({node: node_state.state for node, node_state in service.nodes.items()})[0] == [
        nodes[0],
        nodes[5],
    ]


def test_every_node_refused_costs_at_most_two_calls_a_node():
    nodes = ids(4)
    service = RunCommand({node: Node(registered=False) for node in nodes})

    delivery = send_in_batches(service.client(), nodes, request)

    assert delivery.refused == dict.fromkeys(nodes, "InvalidInstanceId")
    assert delivery.commands == {}
    assert service.requests == [nodes, nodes[:2], nodes[:1], nodes[1:2], nodes[2:], nodes[2:3], nodes[3:]]


def test_more_than_50_nodes_go_50_to_a_call_and_a_split_batch_keeps_its_arguments():
    nodes = ids(120)
    service = RunCommand({node: Node(registered=node != nodes[60]) for node in nodes})

    delivery = send_in_batches(service.client(), nodes, request)

    assert [len(batch) for batch in delivery.commands.values()] == [50, 7, 3, 1, 1, 12, 25, 20]
    texts = {
        params["Parameters"]["commands"][0]
        for params in service.commands.values()
        if nodes[75] in params["InstanceIds"]
    }
    assert texts == {"echo batch from 50"}
    assert [params["Parameters"]["commands"][0] for params in service.commands.values()][-1] == "echo batch from 100"
    assert delivery.refused == {nodes[60]: "InvalidInstanceId"}


def test_throttling_is_retried_by_botocore_and_the_command_goes_out_once():
    nodes = ids(3)
    service = RunCommand(dict.fromkeys(nodes, Node()), throttled=range(1, 4))

    delivery = send_in_batches(service.client(client_config(4)), nodes, request)

    assert service.requests == [nodes] * 4
    assert (len(delivery.commands), delivery.refused) == (1, {})


def test_throttling_past_the_retries_stops_the_sending_and_is_raised_only_when_nothing_went_out():
    nodes = ids(51)
    service = RunCommand(dict.fromkeys(nodes, Node()), throttled=range(1, 5))
    delivery = send_in_batches(service.client(client_config(4)), nodes, request)
    assert (delivery.commands, delivery.refused) == ({}, dict.fromkeys(nodes, "ThrottlingException"))
    assert service.requests == [nodes[:50]] * 4  # the second batch is not tried
    with pytest.raises(ClientError) as raised:
        delivery.raise_if_nothing_went_out()
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"

    # The first batch goes out; the second is throttled through all four attempts.
    service = RunCommand(dict.fromkeys(nodes, Node()), throttled=range(2, 6))
    delivery = send_in_batches(service.client(client_config(4)), nodes, request)
    assert [len(batch) for batch in delivery.commands.values()] == [50]
    assert delivery.refused == {nodes[50]: "ThrottlingException"}
    delivery.raise_if_nothing_went_out()


@pytest.mark.parametrize(
    "code", [*(code for code in SEND_COMMAND_ERRORS if code != "InvalidInstanceId"), "AccessDeniedException"]
)
def test_a_refusal_of_another_kind_is_the_calls_is_not_split_and_stops_the_sending(code):
    nodes = ids(120)
    service = RunCommand({node: Node(registered=node != nodes[3]) for node in nodes}, refusal=code)

    delivery = send_in_batches(service.client(client_config(2)), nodes, request)

    assert delivery.commands == {}
    assert delivery.refused == dict.fromkeys(nodes, code)
    assert delivery.call_refusal.response["Error"]["Code"] == code
    # Only a server error is sent again, by botocore; nothing is split, no other batch is tried.
    assert service.requests == [nodes[:50]] * (2 if code == "InternalServerError" else 1)
    with pytest.raises(ClientError):
        delivery.raise_if_nothing_went_out()


def test_a_refusal_after_a_batch_went_out_names_the_nodes_not_sent_and_raises_nothing():
    nodes = ids(120)
    service = RunCommand(
        {node: Node(registered=node != nodes[60]) for node in nodes}, refusal="InvalidDocument", refused_from=3
    )

    delivery = send_in_batches(service.client(), nodes, request)

    # Batch 2 is refused for nodes[60], its first half (50..74) again, then InvalidDocument stops the sending.
    assert service.requests == [nodes[:50], nodes[50:100], nodes[50:75]]
    assert list(delivery.commands.values()) == [nodes[:50]]
    assert delivery.refused == dict.fromkeys(nodes[50:], "InvalidDocument")
    assert list(delivery.refused) == nodes[50:]
    delivery.raise_if_nothing_went_out()


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_one_node_a_call_tells_at_once_which_nodes_ssm_did_not_take_under_either_answer(unknown):
    nodes = ids(3)
    service = RunCommand({nodes[0]: Node(), nodes[1]: Node(registered=False), nodes[2]: Node()}, unknown)

    delivery = send_in_batches(service.client(), nodes, request, batch_size=1)

    assert service.requests == [[node] for node in nodes]
    assert delivery.refused == {nodes[1]: "InvalidInstanceId"}
    assert list(delivery.commands.values()) == [[nodes[0]], [nodes[2]]]
    # Each call's arguments are those of its own position.
    assert [params["Parameters"]["commands"] for params in service.commands.values()] == [
        ["echo batch from 0"],
        ["echo batch from 2"],
    ]


@pytest.mark.parametrize("batch_size", [0, 51])
def test_a_batch_size_sendcommand_does_not_take_is_refused(batch_size):
    with pytest.raises(ValueError, match=f"batch_size {batch_size}: SendCommand takes 1 to 50 ids"):
        send_in_batches(RunCommand({}).client(), ids(2), request, batch_size=batch_size)


def test_the_largest_and_smallest_batch_sizes_are_taken():
    nodes = ids(51)
    service = RunCommand(dict.fromkeys(nodes, Node()))
    assert [len(batch) for batch in send_in_batches(service.client(), nodes, request, 50).commands.values()] == [50, 1]
    assert len(send_in_batches(service.client(), nodes[:2], request, 1).commands) == 2


def test_no_node_no_call():
    service = RunCommand({})
    delivery = send_in_batches(service.client(), [], request)
    assert (delivery.commands, delivery.refused, service.requests) == ({}, {}, [])


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_a_batch_no_node_of_which_ssm_reaches_is_refused_node_by_node_and_nothing_raised(unknown):
    nodes = ids(2)
    service = RunCommand({nodes[0]: Node(state="terminated"), nodes[1]: Node(state="shutting-down")}, unknown)
    delivery = send_in_batches(service.client(), nodes, request)
    assert (delivery.commands, delivery.refused) == ({}, dict.fromkeys(nodes, "InvalidInstanceId"))
    assert delivery.call_refusal is None
    delivery.raise_if_nothing_went_out()
