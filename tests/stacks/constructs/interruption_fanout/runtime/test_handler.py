"""The interruption fan-out Lambda against moto's EC2 (instances tagged like the nodes of two environments), or EC2
answered with the states moto never shows (pending, stopping, shutting-down), and Run Command as botocore's model
describes it (tests/run_command.py: moto's answers say nothing about which command reached which node), under both
answers to what SSM does with one node it cannot reach among many."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from stacks.constructs.interruption_fanout.runtime import handler
from tests.answering import answering_client
from tests.run_command import UNKNOWN, WHOLE_CALL, Node, RunCommand

REGION = "us-east-1"
SETTINGS = "/etc/gpufleet/node.env"


class RecordingSsm:
    """Run Command for every instance EC2 describes, each in its EC2 state with its agent registered but for those
    named UNREGISTERED (a node still booting); SENT: each command SSM took, its parameters."""

    def __init__(self, ec2, unknown: str = WHOLE_CALL, unregistered=(), throttled=()) -> None:
        described = [
            instance
            for reservation in ec2.describe_instances()["Reservations"]
            for instance in reservation["Instances"]
        ]
        nodes = {
            instance["InstanceId"]: Node(instance["State"]["Name"], instance["InstanceId"] not in unregistered)
            for instance in described
        }
        self.service = RunCommand(nodes, unknown, throttled=throttled)
        self.client = self.service.client(handler.CLIENT_CONFIG)

    @property
    def sent(self) -> list[dict]:
        return list(self.service.commands.values())

    def received(self, node: str) -> int:
        return len(self.service.received(node))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    """botocore's waits between retries are not slept."""
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)


@pytest.fixture
def ec2(monkeypatch):
    for variable, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(variable, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def launch(ec2, environment: str | None, count: int = 1) -> list[str]:
    image_id = ec2.register_image(Name=f"node-{environment}-{count}", RootDeviceName="/dev/sda1")["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "gpufleet:environment", "Value": environment}]}]
    instances = ec2.run_instances(
        ImageId=image_id,
        InstanceType="p4d.24xlarge",
        MinCount=count,
        MaxCount=count,
        **({"TagSpecifications": tags} if environment else {}),
    )["Instances"]
    return sorted(instance["InstanceId"] for instance in instances)


def warning(instance_id: str, detail_type: str = "EC2 Spot Instance Interruption Warning") -> dict:
    """The event as the EC2 user guide shows it (spot-instance-termination-notices.html)."""
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-26T19:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


def fan_out(ec2, event: dict, ssm: RecordingSsm) -> dict:
    return handler.fan_out(event, ec2, ssm.client, "train", SETTINGS)


@pytest.mark.parametrize(
    ("detail_type", "notice_path"),
    [
        ("EC2 Spot Instance Interruption Warning", "peer/spot-interruption"),
        ("EC2 Instance Rebalance Recommendation", "peer/rebalance-recommendation"),
        ("EC2 Spot Instance Rebalance Recommended", "peer/rebalance-recommendation"),
    ],
)
def test_a_warned_node_makes_every_other_running_node_of_its_environment_run_the_hook(ec2, detail_type, notice_path):
    warned, *others = launch(ec2, "train", count=3)
    launch(ec2, "other")
    ssm = RecordingSsm(ec2)

    line = fan_out(ec2, warning(warned, detail_type), ssm)

    assert ssm.sent == [
        {
            "InstanceIds": sorted(others),
            "DocumentName": "AWS-RunShellScript",
            "Comment": f"gpufleet train: {detail_type} for {warned}",
            "Parameters": {
                "commands": [
                    f". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH={notice_path} GPUFLEET_NOTICE={warned} "
                    'bash -c "$GPUFLEET_CHECKPOINT_HOOK"'
                ]
            },
        }
    ]
    assert line == {
        "event": "interruption-fanout",
        "detail_type": detail_type,
        "instance": warned,
        "notice_path": notice_path,
        "nodes": sorted(others),
        "commands": list(ssm.service.commands),
        "passed_over": [],
        "refused": [],
    }
    assert len(ssm.sent) == 1


def test_a_warning_for_an_instance_outside_the_environment_sends_nothing(ec2):
    launch(ec2, "train", count=2)
    (stranger,) = launch(ec2, "other")
    (untagged,) = launch(ec2, None)
    ssm = RecordingSsm(ec2)

    lines = [fan_out(ec2, warning(instance), ssm) for instance in (stranger, untagged, "i-0123456789abcdef0")]

    assert ssm.sent == []
    assert [line["skipped"] for line in lines] == [
        f"{stranger} is not a node of train",
        f"{untagged} is not a node of train",
        "i-0123456789abcdef0 is not a node of train",
    ]


def test_stopped_and_terminated_nodes_get_no_command_and_a_lone_node_sends_none(ec2):
    warned, stopped, gone = launch(ec2, "train", count=3)
    ec2.stop_instances(InstanceIds=[stopped])
    ec2.terminate_instances(InstanceIds=[gone])
    ssm = RecordingSsm(ec2)

    line = fan_out(ec2, warning(warned), ssm)

    assert ssm.sent == []
    assert (line["nodes"], line["commands"]) == ([], [])


def test_more_than_fifty_nodes_go_in_batches_of_fifty(ec2):
    warned, *others = launch(ec2, "train", count=52)
    ssm = RecordingSsm(ec2)

    fan_out(ec2, warning(warned), ssm)

    assert [sent["InstanceIds"] for sent in ssm.sent] == [sorted(others)[:50], sorted(others)[50:]]


@pytest.mark.parametrize(
    "event",
    [
        {"detail-type": "EC2 Instance State-change Notification", "detail": {"instance-id": "i-0123456789abcdef0"}},
        {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}},
        # Never written into the shell command: only an instance id as EC2 writes it is.
        {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": "i-1; reboot"}},
        {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": "i-0123456789abcdef"}},
    ],
)
def test_an_event_that_is_not_a_warning_with_an_instance_id_is_skipped_without_a_call(event):
    line = handler.fan_out(event, ec2=None, ssm=None, environment="train", settings_file=SETTINGS)
    assert line["skipped"] == "not a spot interruption warning or rebalance recommendation with an instance id"


def test_a_short_instance_id_is_accepted():
    assert handler.INSTANCE_ID.fullmatch("i-0123abcd")


def test_on_notice_reads_its_settings_from_the_environment_and_prints_one_json_line(ec2, monkeypatch, capsys):
    warned, other = launch(ec2, "train", count=2)
    monkeypatch.setenv("ENVIRONMENT_NAME", "train")
    monkeypatch.setenv("SETTINGS_FILE", "/etc/elsewhere.env")
    ssm = RecordingSsm(ec2)

    line = handler.on_notice(warning(warned), None, clients={"ec2": ec2, "ssm": ssm.client})

    assert ssm.sent[0]["Parameters"]["commands"][0].startswith(". /etc/elsewhere.env && ")
    assert json.loads(capsys.readouterr().out) == line


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_a_peer_still_booting_does_not_keep_the_warning_from_the_other_49(ec2, unknown):
    """A running node whose SSM agent is not registered yet, in the first batch of 50."""
    warned, *peers = launch(ec2, "train", count=51)
    booting = peers[7]
    ssm = RecordingSsm(ec2, unknown, unregistered=[booting])

    line = fan_out(ec2, warning(warned), ssm)

    assert [ssm.received(peer) for peer in peers] == [
        0 if peer == booting and unknown == WHOLE_CALL else 1 for peer in peers
    ]
    assert line["nodes"] == peers
    assert line["refused"] == ([f"{booting}: SSM refused it (InvalidInstanceId)"] if unknown == WHOLE_CALL else [])
    assert ssm.received(warned) == 0


def described_as(states: dict[str, str]):
    """EC2 answering DescribeInstances for nodes of `train` in STATES (instance id -> state), as EC2 filters them: by
    the environment tag and by instance-state-name (moto starts every instance running and ends a stopping or
    shutting-down one at once)."""
    codes = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

    def describe(params):
        filters = {entry["Name"]: entry["Values"] for entry in params["Filters"]}
        assert filters["tag:gpufleet:environment"] == ["train"]
        wanted = filters.get("instance-state-name", list(codes))
        instances = [
            {"InstanceId": node, "State": {"Code": codes[state], "Name": state}}
            for node, state in states.items()
            if state in wanted
        ]
        return {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "Instances": instances}]}

    client, _ = answering_client(
        "ec2",
        {"DescribeInstances": describe},
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return client


PEER_STATES = {
    "i-00000000000000001": "running",
    "i-00000000000000002": "pending",
    "i-00000000000000003": "running",
    "i-00000000000000004": "stopping",
    "i-00000000000000005": "shutting-down",
    "i-00000000000000006": "stopped",
    "i-00000000000000007": "terminated",
}


@pytest.mark.parametrize("unknown", UNKNOWN)
def test_only_running_peers_get_the_hook_and_the_others_are_named(unknown):
    """Pins the recipients to the running peers: a pending, stopping or shutting-down peer runs no job to
    checkpoint, and a command SSM holds for it runs after the moment (gpufleet.ssm_batches.NO_COMMAND_BECAUSE)."""
    warned = "i-00000000000000000"
    states = {warned: "running", **PEER_STATES}
    service = RunCommand({node: Node(state, registered=state != "pending") for node, state in states.items()}, unknown)

    line = handler.fan_out(warning(warned), described_as(states), service.client(), "train", SETTINGS)

    assert [params["InstanceIds"] for params in service.commands.values()] == [
        ["i-00000000000000001", "i-00000000000000003"]
    ]
    assert service.requests == [["i-00000000000000001", "i-00000000000000003"]]
    assert line["passed_over"] == [
        "i-00000000000000002: no command (pending: still starting, its SSM agent may not be registered yet)",
        "i-00000000000000004: no command (stopping: a command would wait for its next start)",
        "i-00000000000000005: no command (shutting-down: SSM refuses it)",
    ]
    assert line["refused"] == []


def test_a_warned_node_that_is_already_shutting_down_still_warns_its_running_peers():
    warned = "i-00000000000000000"
    states = {warned: "shutting-down", **PEER_STATES}
    service = RunCommand({node: Node(state) for node, state in states.items()})

    line = handler.fan_out(warning(warned), described_as(states), service.client(), "train", SETTINGS)

    assert line["nodes"] == ["i-00000000000000001", "i-00000000000000003"]
    assert len(service.commands) == 1


def test_throttling_is_retried_and_a_batch_throttled_past_the_retries_still_leaves_the_line(ec2):
    warned, *peers = launch(ec2, "train", count=52)
    # The first call is throttled once then taken; the second is throttled through the client's four attempts.
    ssm = RecordingSsm(ec2, throttled=[1, 3, 4, 5, 6])

    line = fan_out(ec2, warning(warned), ssm)

    assert [ssm.received(peer) for peer in peers] == [1] * 50 + [0]
    assert line["refused"] == [f"{peers[50]}: SSM refused it (ThrottlingException)"]
    assert len(ssm.service.requests) == 6


def test_a_refusal_of_the_call_itself_fails_the_run_before_anything_went_out(ec2):
    warned, *_ = launch(ec2, "train", count=3)
    ssm = RecordingSsm(ec2)
    ssm.service.refusal = "AccessDeniedException"

    with pytest.raises(ClientError) as raised:
        fan_out(ec2, warning(warned), ssm)

    assert raised.value.response["Error"]["Code"] == "AccessDeniedException"
    assert len(ssm.service.requests) == 1
