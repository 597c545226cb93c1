"""`gpufleet run --torchrun` through a lost spot node, on the box's real nodes (run last: it ends the box's spot node).

examples/ddp_train.py under Debian's torchrun (python3-torch 1.13.1, CPU, gloo), 8 processes a node as on a p4d,
started by the installed console script through Run Command and systemd. The head, on-demand, has a second interface,
so torch's own guess of the rendezvous store's host would be wrong and gpufleet's is_host=1 on the head is what counts.
Then the spot interruption as AWS delivers it: the notice in the spot node's metadata (its watcher runs the checkpoint
hook) and EC2's EventBridge event, whose documented sample the fan-out function (its own handler code, against the
emulator) turns into Run Command on every other node, so the head's processes checkpoint too. EC2 ends the node; the
head's torchrun goes on alone from the checkpoint on /fsx; a new spot node boots, its join-runs step reads the run's
description and joins; the run resumes from the checkpoint and finishes with both nodes. `gpufleet runs` and `logs`
read it back.

Torch 1.13's torchrun needs a one-function mend on Python 3.11 (tests/examples/debian_torch_shim, in the box's image at
/usr/share/box/debian_torch_shim), which the run's --setup puts on PYTHONPATH, as a user's --setup would prepare their
own environment; the command line is the one gpufleet generates, untouched."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

from gpufleet.user_data import SETTINGS_FILE
from tests.box.journey import journal, started_run, wait_unit_over

REPOSITORY = Path(__file__).resolve().parents[2]
# Long enough that the head is still training alone when the replacement has booted (about a minute here).
STEPS = 120
CHECKPOINTS = "/fsx/data/checkpoints/journey"
SETUP = "export PYTHONPATH=/usr/share/box/debian_torch_shim OMP_NUM_THREADS=1"


def events(lines: list[str]) -> list[dict]:
    """Rank 0's JSON lines (examples/ddp_train.py), in the order printed."""
    found = []
    for line in lines:
        start = line.find('{"')
        if start >= 0:
            try:
                found.append(json.loads(line[start:]))
            except json.JSONDecodeError:
                continue
    return found


def segments(all_events: list[dict]) -> list[list[dict]]:
    """One list per start of the workers: the start line, then its steps and checkpoints."""
    found: list[list[dict]] = []
    for event in all_events:
        if event["event"] == "start":
            found.append([event])
        elif found:
            found[-1].append(event)
    return found


def run_events(nodes, run_id: str) -> list[dict]:
    collected = []
    for node in nodes:
        if node.alive():
            collected += events(journal(node, run_id))
    return collected


def wait_for(condition, what: str, nodes, run_id: str, seconds: float = 240) -> list[dict]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = run_events(nodes, run_id)
        if condition(found):
            return found
        time.sleep(1)
    logs = "\n".join("\n".join(journal(node, run_id)[-40:]) for node in nodes if node.alive())
    raise AssertionError(f"no {what} within {seconds:.0f}s:\n{logs}")


def wait_invocation(ssm, command_id: str, instance_id: str, seconds: float = 120) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        invocation = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        if invocation["Status"] not in ("Pending", "InProgress", "Delayed"):
            return invocation
        time.sleep(1)
    raise AssertionError(f"command {command_id} still running on {instance_id} after {seconds:.0f}s")


def interruption_warning(instance_id: str, region: str, account: str) -> dict:
    """EC2's event, as the EC2 user guide shows it (spot-instance-termination-notices.html)."""
    return {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": account,
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


def test_a_lost_spot_node_costs_a_restart_and_its_replacement_joins(box_cluster):
    cluster, head, spot = box_cluster.cluster, box_cluster.head, box_cluster.spot
    assert cluster.box is not None
    examples = cluster.box.shared_dir / "examples"
    examples.mkdir(exist_ok=True)
    shutil.copy(REPOSITORY / "examples" / "ddp_train.py", examples)
    command = [
        "/fsx/examples/ddp_train.py",
        "--checkpoint-dir",
        CHECKPOINTS,
        "--steps",
        str(STEPS),
        "--checkpoint-every",
        "1000",
        "--step-seconds",
        "0.3",
    ]
    run_id = started_run(
        cluster.gpufleet(
            "run",
            "prod",
            "--fleet-id",
            cluster.fleet_id,
            "--torchrun",
            "--min-nodes",
            "1",
            "--setup",
            SETUP,
            "--",
            *command,
        )
    )
    nodes = [head, spot]
    first = wait_for(
        lambda found: sum(1 for event in found if event["event"] == "step") >= 10,
        "10 steps on two nodes",
        nodes,
        run_id,
    )
    assert segments(first)[0][0]["world_size"] == 16

    # The interruption: the notice in the spot node's metadata, EC2's event to the fan-out function.
    spot.set_metadata(
        spot_instance_action={
            "action": "terminate",
            "time": (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    line = cluster.lambda_handler(
        "interruption_fanout",
        "on_notice",
        interruption_warning(spot.instance_id, cluster.env.region, cluster.env.account),
        ENVIRONMENT_NAME=cluster.env.name,
        SETTINGS_FILE=SETTINGS_FILE,
    )
    assert line["nodes"] == [head.instance_id]
    # Both hooks run to their end (the spot node's watcher, the head's Run Command) well inside the two minutes.
    watcher = spot.run(
        "sh",
        "-c",
        "until journalctl -u gpufleet-spot-watcher -o cat | grep -q 'checkpoint hook finished'; do sleep 1; "
        "done; journalctl -u gpufleet-spot-watcher -o cat",
        timeout=120,
    ).stdout
    assert (
        "spot-watcher: running checkpoint hook for spot/instance-action: /usr/local/bin/save-checkpoint --wait 100"
        in watcher
    )
    ssm = cluster.aws.client("ssm")
    (fanned,) = line["commands"]
    invocation = wait_invocation(ssm, fanned, head.instance_id)
    assert invocation["Status"] == "Success", invocation
    assert "asked 8 process(es) to checkpoint" in invocation["StandardOutputContent"]
    saved = [event["step"] for event in run_events(nodes, run_id) if event["event"] == "checkpoint"]
    assert saved, "no checkpoint on the hooks' requests"

    cluster.terminate(spot)
    alone = wait_for(
        lambda found: any(s[0]["world_size"] == 8 for s in segments(found)),
        "a restart on the head alone",
        [head],
        run_id,
    )
    assert [s for s in segments(alone) if s[0]["world_size"] == 8][0][0]["resumed_from"] == max(saved)

    replacement = cluster.launch("spot")
    assert cluster.wait_ready(replacement) == "ready"
    # Its last setup step, after the readiness tag: the node's setup unit is done once the step is.
    replacement.run("systemctl", "start", "gpufleet-node-setup", timeout=120)
    joined = replacement.run("journalctl", "-u", "gpufleet-node-setup", "-o", "cat").stdout
    folder = cluster.box.shared_dir / "gpufleet-runs" / run_id
    assert f"run {run_id}: joined as node rank 2" in joined, (
        f"{joined}\nrun folder: {sorted(path.name for path in folder.iterdir())}\n"
        + "\n".join(journal(head, run_id)[-30:])
    )
    listed = cluster.gpufleet("runs", "prod", "--fleet-id", cluster.fleet_id)
    assert listed.returncode == 0, listed.stderr
    # The lost node's unit went with it; the head's and the replacement's run.
    assert f"{run_id}: 2 active/running" in listed.stdout.splitlines()
    assert wait_unit_over(head, run_id, seconds=400) == "success", "\n".join(journal(head, run_id)[-60:])

    everything = run_events([head, replacement], run_id)
    worlds = [segment[0]["world_size"] for segment in segments(everything)]
    assert worlds[-1] == 16 and 8 in worlds
    assert any(event["event"] == "done" for event in everything)

    logs = cluster.gpufleet("logs", "prod", run_id, "--fleet-id", cluster.fleet_id)
    assert logs.returncode == 0, logs.stderr
    assert '"event": "done"' in logs.stdout or '"event":"done"' in logs.stdout
