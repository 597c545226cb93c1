"""The box's AWS emulator (tests/box/aws.py, aws_server.py) against one real box node: the node's own AWS CLI (Debian's
awscli 2.9) reaches it over HTTPS by the real endpoint names, with the box's CA in the node's trust store and the
credentials of the node's metadata service, and nothing else; Run Command runs on the node as the SSM agent runs
AWS-RunShellScript and reports what happened with the agent's cuts (aws_server.py's docstring cites the agent's
source for every expected value here)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.box.aws import AwsEmulator, instance_credentials
from tests.box.aws_server import execution_timeout
from tests.box.conftest import missing_requirements
from tests.box.nodes import Box, Node, NodeSpec
from tests.box.rootfs import ensure_rootfs

REPOSITORY = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
BUCKET = "box-emulator-test-bucket"
INSTANCE_ID = "i-0a770000000000010"
ADDRESS = "10.77.0.10"
ROLE = "box-emulator-test-role"


def node_spec(instance_id: str, address: str, mac: str) -> NodeSpec:
    hostname = "ip-" + address.replace(".", "-")
    metadata = {
        "http_tokens": "required",
        "meta-data": {
            "instance-id": instance_id,
            "local-ipv4": address,
            "placement": {"region": REGION, "availability-zone": f"{REGION}b"},
            "iam": instance_credentials(ROLE),
        },
        "identity": {"instanceId": instance_id, "region": REGION},
    }
    return NodeSpec(instance_id, address, mac, hostname, metadata)


def node_files(box: Box, aws: AwsEmulator) -> dict[str, tuple[bytes, int]]:
    """A node's own layer: the box's CA in its trust store, its resolver at the subnet's .2 (the VPC's DNS)."""
    return {
        **aws.node_trust_files(),
        "/etc/resolv.conf": (f"nameserver {box.endpoint_address}\n".encode(), 0o644),
    }


class World:
    def __init__(self, box: Box, aws: AwsEmulator, node: Node) -> None:
        self.box = box
        self.aws = aws
        self.node = node
        self.ssm = aws.client("ssm")

    def send(self, *commands: str, timeout: str | None = None, instance_id: str = INSTANCE_ID) -> str:
        parameters: dict[str, list[str]] = {"commands": list(commands)}
        if timeout is not None:
            parameters["executionTimeout"] = [timeout]
        answer = self.ssm.send_command(
            InstanceIds=[instance_id], DocumentName="AWS-RunShellScript", Parameters=parameters
        )
        assert answer["Command"]["Status"] == "Pending"
        return answer["Command"]["CommandId"]

    def invocation(self, command_id: str, instance_id: str = INSTANCE_ID) -> dict[str, Any]:
        return self.ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)

    def wait(self, command_id: str, seconds: float = 30, instance_id: str = INSTANCE_ID) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while True:
            answer = self.invocation(command_id, instance_id)
            if answer["Status"] not in ("Pending", "InProgress", "Delayed") or time.monotonic() > deadline:
                return answer
            time.sleep(0.1)

    def plugin(self, command_id: str) -> dict[str, Any]:
        (entry,) = self.ssm.list_command_invocations(CommandId=command_id, Details=True)["CommandInvocations"]
        (plugin,) = entry["CommandPlugins"]
        return plugin

    def node_file(self, path: str) -> str:
        return self.node.run("cat", path, timeout=30).stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    problems = missing_requirements()
    if problems:
        pytest.fail("the box cannot run here:\n" + "\n".join(problems), pytrace=False)
    directory = tmp_path_factory.mktemp("aws-box")
    lower = [REPOSITORY / "tests" / "box" / "image" / "layer", ensure_rootfs(lambda *words: None)]
    box = Box(directory / "box", "10.77.0.0/24", lower, directory / "shared", "/fsx", "/scratch")
    aws = AwsEmulator(box, [REGION], buckets=[BUCKET])
    try:
        box.start()
        aws.start()
        node = box.boot(node_spec(INSTANCE_ID, ADDRESS, "0e:77:00:00:00:10"), node_files(box, aws))
        box.wait_running(node)
        yield World(box, aws, node)
    finally:
        aws.stop()
        box.close()
    assert box.leftovers() == []


def test_execution_timeout_is_read_as_the_agent_reads_it():
    # pluginutil.ValidateExecutionTimeout: an integer, else a float cut to one, else 3600; out of 5..172800: 3600.
    values = ["3600", "5", "4", "172800", "172801", "10.9", "ten", None, ["30"]]
    assert [execution_timeout(value) for value in values] == [3600, 5, 3600, 172800, 3600, 10, 3600, 3600, 30]


# -- the node's AWS CLI -----------------------------------------------------------------------------------------------


def test_node_cli_reaches_the_emulator_by_name_over_https_with_instance_credentials(world):
    resolved = world.node.run("getent", "hosts", f"ec2.{REGION}.amazonaws.com", timeout=30)
    assert resolved.stdout.split() == ["10.77.0.2", "ec2.us-east-1.amazonaws.com"]

    done = world.node.run("aws", "ec2", "describe-instances", "--region", REGION, "--debug", timeout=120)

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"Reservations": []}
    assert "Found credentials from IAM Role: box-emulator-test-role" in done.stderr
    assert "Certificate path: /etc/ssl/certs/ca-certificates.crt" in done.stderr
    assert "Starting new HTTPS connection (1): ec2.us-east-1.amazonaws.com:443" in done.stderr
    assert "10.77.0.10 - - " in world.aws.log.read_text()


def test_node_cli_copies_an_object_the_host_put_by_its_virtual_hosted_name(world):
    s3 = world.aws.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="scripts/ops.txt", Body=b"put by the host\n")

    done = world.node.run("aws", "s3", "cp", f"s3://{BUCKET}/scripts/ops.txt", "-", "--region", REGION, "--debug")

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "put by the host\n"
    assert f"Starting new HTTPS connection (1): {BUCKET}.s3.us-east-1.amazonaws.com:443" in done.stderr


def test_node_reaches_nothing_but_the_emulator(world):
    routes = world.node.run("ip", "-4", "route", timeout=30).stdout
    assert routes == "10.77.0.0/24 dev eth0 proto kernel scope link src 10.77.0.10 \n"
    unroutable = world.node.run("ip", "route", "get", "52.94.236.248", timeout=30)
    assert (unroutable.returncode, unroutable.stderr) == (2, "RTNETLINK answers: Network is unreachable\n")
    outside = world.node.run("curl", "-sS", "--max-time", "5", "https://52.94.236.248/", timeout=30)
    assert outside.returncode == 7
    assert "Couldn't connect to server" in outside.stderr
    # A region whose endpoints the box does not answer: the name does not resolve, so the CLI reaches nothing.
    other = world.node.sh(
        "AWS_MAX_ATTEMPTS=1 aws ec2 describe-instances --region eu-west-1 --cli-connect-timeout 5", timeout=120
    )
    assert other.returncode == 255
    assert 'Could not connect to the endpoint URL: "https://ec2.eu-west-1.amazonaws.com/"' in other.stderr


# -- Run Command ------------------------------------------------------------------------------------------------------


def test_send_command_runs_as_root_via_sh_c_in_usr_bin_in_the_agent_cgroup(world):
    commands = [
        "id -u",
        "pwd",
        "tail -n 1 /proc/self/cgroup",
        # The script file has no #!: dash's `sh -c SCRIPT` runs it in a child /bin/sh (ENOEXEC), so the script's
        # parent is the `sh -c` the agent started, the leader of the command's process group.
        "tr '\\0' ' ' </proc/$PPID/cmdline; echo",
        "tr '\\0' ' ' </proc/$$/cmdline; echo",
        'test "$(ps -o pgid= -p $$ | tr -d " ")" = "$PPID" && echo in the process group of sh -c',
        "readlink /proc/$PPID/fd/0",
        "env | grep -E '^(SSM_COMMAND_ID|AWS_SSM_[A-Z_]+|PWD)=' | sort",
        'stat -c "%a %U" "$0" "$(dirname "$0")" /var/lib/amazon/ssm',
    ]
    command_id = world.send(*commands)

    answer = world.wait(command_id)

    directory = (
        f"/var/lib/amazon/ssm/{INSTANCE_ID}/document/orchestration/{command_id}/awsrunShellScript/0.awsrunShellScript"
    )
    script = f"{directory}/_script.sh"
    expected = (
        "0\n"
        "/usr/bin\n"
        "0::/system.slice/amazon-ssm-agent.service\n"
        f"sh -c {script} \n"
        f"/bin/sh {script} \n"
        "in the process group of sh -c\n"
        "/dev/null\n"
        "AWS_SSM_INSTANCE_ID=i-0a770000000000010\n"
        "AWS_SSM_PLATFORM_NAME=Debian GNU/Linux\n"
        "AWS_SSM_PLATFORM_VERSION=12\n"
        "AWS_SSM_REGION_NAME=us-east-1\n"
        "PWD=/usr/bin\n"
        f"SSM_COMMAND_ID={command_id}\n"
        "700 root\n"
        "700 root\n"
        "700 root\n"
    )
    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("Success", "Success", 0)
    assert answer["StandardOutputContent"] == expected
    assert answer["StandardErrorContent"] == ""
    assert world.node_file(script) == "\n".join(commands) + "\n"
    assert world.node_file(f"{directory}/stdout") == expected
    assert world.node.run("stat", "-c", "%a", f"{directory}/stdout", timeout=30).stdout == "600\n"


def test_exit_codes_and_the_failure_line(world):
    success = world.send("echo fine")
    failure = world.send("echo partial", "echo oops >&2", "exit 3")
    quiet = world.send("exit 42")
    killed = world.send("echo before", "kill -9 $PPID")
    exit_137 = world.send("exit 137")

    answer = world.wait(success)
    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("Success", "Success", 0)
    assert answer["StandardOutputContent"] == "fine\n"
    answer = world.wait(failure)
    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("Failed", "Failed", 3)
    assert answer["StandardOutputContent"] == "partial\n"
    assert answer["StandardErrorContent"] == "oops\nfailed to run commands: exit status 3"
    assert world.plugin(failure)["Output"] == (
        "partial\n\n----------ERROR-------\noops\nfailed to run commands: exit status 3"
    )
    answer = world.wait(quiet)
    assert (answer["Status"], answer["ResponseCode"]) == ("Failed", 42)
    assert answer["StandardErrorContent"] == "failed to run commands: exit status 42"
    # `sh -c` itself killed: Go reports the signal, with exit code -1.
    answer = world.wait(killed)
    assert (answer["Status"], answer["ResponseCode"]) == ("Failed", -1)
    assert answer["StandardOutputContent"] == "before\n"
    assert answer["StandardErrorContent"] == "failed to run commands: signal: killed"
    # The agent takes exit code 137 for its own timeout kill, whoever exited with it (pluginutil_unix.go GetStatus).
    answer = world.wait(exit_137)
    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("TimedOut", "ExecutionTimedOut", 137)
    assert answer["StandardErrorContent"] == ""


def test_execution_timeout_kills_the_process_group_and_spares_a_systemd_run_unit(world):
    world.node.run("systemctl", "stop", "box-survivor.service", timeout=30)
    command_id = world.send(
        "systemd-run --quiet --unit=box-survivor sleep 600",
        "sleep 600 &",
        "echo $! >/run/box-background.pid",
        "echo started",
        "sleep 600",
        timeout="5",
    )

    answer = world.wait(command_id, seconds=20)

    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("TimedOut", "ExecutionTimedOut", 137)
    assert answer["StandardOutputContent"] == "started\n"
    assert answer["StandardErrorContent"] == ""
    background = world.node_file("/run/box-background.pid").strip()
    assert world.node.run("kill", "-0", background, timeout=30).returncode == 1
    assert world.node.run("pgrep", "-f", "sleep 600$", timeout=30).stdout.split() == [
        world.node.run("systemctl", "show", "-P", "MainPID", "box-survivor.service", timeout=30).stdout.strip()
    ]
    assert world.node.run("systemctl", "is-active", "box-survivor.service", timeout=30).stdout == "active\n"
    world.node.run("systemctl", "stop", "box-survivor.service", timeout=30)


def test_output_cut_at_24000_and_2500_characters_with_the_agents_markers(world):
    both = world.send("head -c 30000 /dev/zero | tr '\\0' a", "head -c 30000 /dev/zero | tr '\\0' b >&2")
    out_only = world.send("head -c 30000 /dev/zero | tr '\\0' c")
    at_limit = world.send("head -c 24000 /dev/zero | tr '\\0' d")
    under_limit = world.send("head -c 23999 /dev/zero | tr '\\0' e")

    answer = world.wait(both)
    assert answer["Status"] == "Success"
    assert answer["StandardOutputContent"] == "a" * 23980 + "--output truncated--"
    assert answer["StandardErrorContent"] == "b" * 7980 + "--output truncated--"
    assert world.plugin(both)["Output"] == (
        "a" * 1215 + "\n---Output truncated---" + "\n----------ERROR-------\n" + "b" * 1215 + "\n---Error truncated----"
    )
    world.wait(out_only)
    assert world.plugin(out_only)["Output"] == "c" * 2477 + "\n---Output truncated---"
    # StringPrefix cuts a string as long as the limit too (len(input) < maxLength keeps it whole).
    assert world.wait(at_limit)["StandardOutputContent"] == "d" * 23980 + "--output truncated--"
    assert world.wait(under_limit)["StandardOutputContent"] == "e" * 23999


def test_a_running_command_reports_no_output_until_it_is_over(world):
    world.node.run("rm", "-f", "/run/box-release", timeout=30)
    command_id = world.send("echo early", "while [ ! -e /run/box-release ]; do sleep 0.1; done", "echo late")
    directory = (
        f"/var/lib/amazon/ssm/{INSTANCE_ID}/document/orchestration/{command_id}/awsrunShellScript/0.awsrunShellScript"
    )
    deadline = time.monotonic() + 20
    while world.node_file(f"{directory}/stdout") != "early\n" and time.monotonic() < deadline:
        time.sleep(0.1)

    running = world.invocation(command_id)
    plugin = world.plugin(command_id)

    assert (running["Status"], running["StatusDetails"], running["ResponseCode"]) == ("InProgress", "InProgress", -1)
    assert running["StandardOutputContent"] == ""
    assert running["ExecutionEndDateTime"] == ""
    assert (plugin["Status"], plugin["ResponseCode"], plugin["Output"]) == ("InProgress", -1, "")
    world.node.run("touch", "/run/box-release", timeout=30)
    assert world.wait(command_id)["StandardOutputContent"] == "early\nlate\n"


def test_a_command_waits_pending_while_the_agent_is_stopped(world):
    world.node.run("systemctl", "stop", "amazon-ssm-agent.service", timeout=30)
    try:
        command_id = world.send("echo delivered")
        time.sleep(1.5)
        pending = world.invocation(command_id)
        assert (pending["Status"], pending["StatusDetails"], pending["ResponseCode"]) == ("Pending", "Pending", -1)
        assert (pending["StandardOutputContent"], pending["ExecutionStartDateTime"]) == ("", "")
    finally:
        world.node.run("systemctl", "start", "amazon-ssm-agent.service", timeout=30)
    assert world.wait(command_id)["StandardOutputContent"] == "delivered\n"


def test_an_instance_the_box_does_not_run_is_refused_for_the_whole_call(world):
    with pytest.raises(ClientError) as refused:
        world.ssm.send_command(
            InstanceIds=[INSTANCE_ID, "i-0a77000000000ffff"],
            DocumentName="AWS-RunShellScript",
            Parameters={"commands": ["touch /run/box-refused"]},
        )

    assert refused.value.response["Error"]["Code"] == "InvalidInstanceId"
    time.sleep(0.5)
    assert world.node.run("test", "-e", "/run/box-refused", timeout=30).returncode == 1


def test_a_node_gone_before_delivery_ends_undeliverable(world):
    instance_id = "i-0a770000000000011"
    node = world.box.boot(node_spec(instance_id, "10.77.0.11", "0e:77:00:00:00:11"), node_files(world.box, world.aws))
    world.box.wait_running(node)
    node.run("systemctl", "stop", "amazon-ssm-agent.service", timeout=30)
    command_id = world.send("echo never", instance_id=instance_id)

    world.box.power_off(node)

    answer = world.wait(command_id, instance_id=instance_id)
    assert (answer["Status"], answer["StatusDetails"], answer["ResponseCode"]) == ("Failed", "Undeliverable", -1)
    with pytest.raises(ClientError) as refused:
        world.send("echo late", instance_id=instance_id)
    assert refused.value.response["Error"]["Code"] == "InvalidInstanceId"
