"""The interruption fan-out Lambda against moto's EC2 (instances tagged like the nodes of two environments) and a
recorder for SSM's SendCommand (moto's answers say nothing about which command reached which node)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from stacks.constructs.interruption_fanout.runtime import handler

REGION = "us-east-1"
SETTINGS = "/etc/gpufleet/node.env"


class RecordingSsm:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send_command(self, **arguments):
        self.sent.append(arguments)
        return {"Command": {"CommandId": f"command-{len(self.sent)}"}}


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
    return handler.fan_out(event, ec2, ssm, "train", SETTINGS)


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
    ssm = RecordingSsm()

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
        "commands": ["command-1"],
    }


def test_a_warning_for_an_instance_outside_the_environment_sends_nothing(ec2):
    launch(ec2, "train", count=2)
    (stranger,) = launch(ec2, "other")
    (untagged,) = launch(ec2, None)
    ssm = RecordingSsm()

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
    ssm = RecordingSsm()

    line = fan_out(ec2, warning(warned), ssm)

    assert ssm.sent == []
    assert (line["nodes"], line["commands"]) == ([], [])


def test_more_than_fifty_nodes_go_in_batches_of_fifty(ec2):
    warned, *others = launch(ec2, "train", count=52)
    ssm = RecordingSsm()

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
    ssm = RecordingSsm()

    line = handler.on_notice(warning(warned), None, clients={"ec2": ec2, "ssm": ssm})

    assert ssm.sent[0]["Parameters"]["commands"][0].startswith(". /etc/elsewhere.env && ")
    assert json.loads(capsys.readouterr().out) == line
