"""gpufleet status and hosts against a Spot Fleet in moto (launch template, --fleet-id or the stack output).

moto does not implement DescribeSpotFleetRequestHistory (NotImplementedError): recent_events is tested with
Stubber, and the end-to-end status runs serve events from a replacement of recent_events.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.ops import fleet as fleet_module
from gpufleet.ops.fleet import FleetEvent, FleetInstance, NodeGroup, recent_events
from tests.gpufleet.ops.conftest import fleet_nodes, make_on_demand, make_subnet, mark_readiness

NOW = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[FleetEvent]:
    served: list[FleetEvent] = []
    monkeypatch.setattr(fleet_module, "recent_events", lambda ec2, request_id, now: served)
    return served


# moto gives a new subnet's instances its addresses in order after the three it reserves (.1 to .3; moto/ec2/models/
# subnets.py, aws_reserved_ips), and launches a fleet's nodes one after the other: in make_subnet's 10.40.0.0/24 the
# nodes are 10.40.0.4, 10.40.0.5, ... in launch order.
THREE_NODES = ["10.40.0.4", "10.40.0.5", "10.40.0.6"]


def test_status_with_fleet_id(spot_fleet, events: list[FleetEvent], run_json) -> None:
    fleet_id = spot_fleet(3)
    events.append(FleetEvent(NOW, "instanceChange", "terminated", "i-0abc", "spot interruption"))
    code, document = run_json("status", "dev", "--fleet-id", fleet_id)
    assert code == 0
    assert (document["fleet_request_id"], document["state"]) == (fleet_id, "active")
    assert (document["target_capacity"], document["fulfilled_capacity"]) == (3, 3.0)
    assert len(document["instances"]) == 3
    assert {i["lifecycle"] for i in document["instances"]} == {"spot"}
    assert {i["availability_zone"] for i in document["instances"]} == {"us-east-1a"}
    assert sorted(i["private_ip"] for i in document["instances"]) == THREE_NODES
    assert document["events"][0]["sub_type"] == "terminated"


def test_status_shows_each_node_image(spot_fleet, node_image_id, events, run_json, run_cli) -> None:
    fleet_id = spot_fleet(2)
    code, document = run_json("status", "dev", "--fleet-id", fleet_id)
    assert code == 0
    assert [i["image_id"] for i in document["instances"]] == [node_image_id, node_image_id]
    assert (document["images"], document["mixed_images"]) == ([node_image_id], False)
    code, out, err = run_cli("status", "dev", "--fleet-id", fleet_id)
    assert out.count(f" {node_image_id}\n") == 2
    assert "mixed images" not in out


def fleet_on_two_images(image_ids: list[str]) -> str:
    """A fleet whose two nodes run different images, as after a new image reached a fleet in place (fleet.rollout:
    manual) and one node was replaced since. moto launches a new launch template version only at creation, so
    the stand-in is one launch template per image and the diversified strategy, which moto spreads over them."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    subnet_id = make_subnet(ec2)
    configs = []
    for number, image_id in enumerate(image_ids):
        template_id = ec2.create_launch_template(
            LaunchTemplateName=f"gpufleet-dev-nodes-{number}",
            LaunchTemplateData={"ImageId": image_id, "InstanceType": "p4d.24xlarge"},
        )["LaunchTemplate"]["LaunchTemplateId"]
        configs.append(
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template_id, "Version": "$Latest"},
                "Overrides": [{"SubnetId": subnet_id, "InstanceType": "p4d.24xlarge"}],
            }
        )
    return ec2.request_spot_fleet(
        SpotFleetRequestConfig={
            "IamFleetRole": "arn:aws:iam::123456789012:role/gpufleet-dev-fleet",
            "TargetCapacity": len(image_ids),
            "AllocationStrategy": "diversified",
            "Type": "maintain",
            "LaunchTemplateConfigs": configs,
        }
    )["SpotFleetRequestId"]


def test_status_flags_nodes_on_different_images(node_image_id, events, run_json, run_cli) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    new_image = ec2.copy_image(Name="gpufleet-test-node-2", SourceImageId=node_image_id, SourceRegion="us-east-1")[
        "ImageId"
    ]
    fleet_id = fleet_on_two_images([node_image_id, new_image])
    both = sorted([node_image_id, new_image])
    code, document = run_json("status", "dev", "--fleet-id", fleet_id)
    assert (document["images"], document["mixed_images"]) == (both, True)
    assert sorted(i["image_id"] for i in document["instances"]) == both
    code, out, err = run_cli("status", "dev", "--fleet-id", fleet_id)
    assert code == 0
    assert (
        f"mixed images: the nodes run {both[0]}, {both[1]}; a new image reached the fleet in place "
        "(fleet.rollout: manual): replace the older nodes to run one image\n"
    ) in out


def test_status_finds_the_fleet_from_the_stack_output(spot_fleet, cluster_stack, events, run_cli) -> None:
    fleet_id = spot_fleet(2)
    cluster_stack(fleet_id)
    code, out, err = run_cli("status", "dev")
    assert code == 0, err
    assert out.startswith(f"Fleet {fleet_id} (dev, us-east-1): active")
    assert "fulfilled 2/2" in out
    assert out.count(" spot ") == 2
    assert out.rstrip().endswith("no fleet events in the last 24h")


def test_stack_missing(moto: None, run_cli) -> None:
    code, _, err = run_cli("status", "dev")
    assert code == 1
    assert (
        err == "stack gpufleet-dev-cluster not found in us-east-1: deploy the cluster (cdk deploy) or pass --fleet-id\n"
    )


def test_stack_without_the_output(cluster_stack, run_cli) -> None:
    cluster_stack(None)
    code, _, err = run_cli("hosts", "dev")
    assert code == 1
    assert "gpufleet-dev-cluster" in err and "has no FleetRequestId output" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["status", "hosts"])
def test_fleet_not_found(moto: None, run_cli, command: str) -> None:
    code, out, err = run_cli(command, "dev", "--fleet-id", "sfr-00000000-0000-0000-0000-000000000000")
    assert code == 1 and out == ""
    assert (
        err == "fleet request sfr-00000000-0000-0000-0000-000000000000 not found in us-east-1: "
        "check --fleet-id or the stack\n"
    )


def test_fleet_not_found_error_code_from_aws(stubbed, run_cli) -> None:
    """Stubber: real EC2 answers an unknown id with InvalidSpotFleetRequestId.NotFound (moto returns an empty list)."""
    stubbed("ec2").add_client_error(
        "describe_spot_fleet_requests", service_error_code="InvalidSpotFleetRequestId.NotFound", http_status_code=400
    )
    code, _, err = run_cli("hosts", "dev", "--fleet-id", "sfr-1")
    assert code == 1 and err.startswith("fleet request sfr-1 not found in us-east-1")


def ready_fleet(spot_fleet, nodes: int) -> str:
    """A fleet of NODES spot nodes in moto, every one of them marked ready."""
    fleet_id = spot_fleet(nodes)
    mark_readiness(fleet_nodes(fleet_id))
    return fleet_id


def test_hosts_mpi(spot_fleet, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 3)
    code, out, _ = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "mpi")
    assert code == 0
    assert out.splitlines() == ["10.40.0.4 slots=8", "10.40.0.5 slots=8", "10.40.0.6 slots=8"]


def test_hosts_torchrun(spot_fleet, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 2)
    code, out, _ = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "torchrun")
    assert code == 0
    assert out == (
        "--nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=10.40.0.4:29500 --rdzv_id=gpufleet-dev\n"
    )


def test_hosts_slurm_and_json(spot_fleet, cluster_stack, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 3)
    cluster_stack(fleet_id)
    code, out, _ = run_cli("hosts", "dev", "--format", "slurm")
    assert code == 0
    assert out == "ip-10-40-0-[4-6]\n"
    code, out, _ = run_cli("hosts", "dev", "--format", "json")
    hosts = json.loads(out)["hosts"]
    assert [h["private_ip"] for h in hosts] == THREE_NODES
    assert (hosts[0]["hostname"], hosts[0]["slots"]) == ("ip-10-40-0-4", 8)


def test_hosts_lists_only_the_nodes_that_say_they_are_ready(spot_fleet, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    mark_readiness([first, third])
    mark_readiness([second], "booting")

    code, out, _ = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "mpi")

    assert code == 0
    assert out.splitlines() == ["10.40.0.4 slots=8", "10.40.0.6 slots=8"]


def test_an_on_demand_node_comes_first_so_rank_0_and_the_rendezvous_land_on_it(spot_fleet, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 3)
    make_on_demand(fleet_nodes(fleet_id)[2])  # the last one launched, at 10.40.0.6

    code, out, err = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "mpi")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["10.40.0.6 slots=8", "10.40.0.4 slots=8", "10.40.0.5 slots=8"]
    code, out, _ = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "torchrun")
    assert "--rdzv_endpoint=10.40.0.6:29500" in out


def test_without_a_ready_on_demand_node_hosts_warns_that_rank_0_is_on_spot(spot_fleet, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 2)
    first = fleet_nodes(fleet_id)[0]

    code, _, err = run_cli("hosts", "dev", "--fleet-id", fleet_id)

    assert code == 0
    assert err == (
        f"warning: no ready on-demand node: rank 0 and the rendezvous go to spot node {first} (10.40.0.4), "
        "which EC2 can reclaim\n"
    )


def test_include_not_ready_lists_every_running_node_the_ready_ones_first(spot_fleet, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    mark_readiness([second])
    mark_readiness([first], "not ready: health check failed: efa")

    code, out, _ = run_cli("hosts", "dev", "--fleet-id", fleet_id, "--format", "json", "--include-not-ready")

    assert code == 0
    hosts = json.loads(out)["hosts"]
    assert [(h["instance_id"], h["readiness"]) for h in hosts] == [
        (second, "ready"),
        (first, "not ready: health check failed: efa"),
        (third, ""),
    ]


def test_hosts_without_a_ready_node_says_what_each_node_is_waiting_for(spot_fleet, run_cli) -> None:
    fleet_id = spot_fleet(2)
    first, second = fleet_nodes(fleet_id)
    mark_readiness([first], "not ready: setup failed: shared-storage")

    code, out, err = run_cli("hosts", "dev", "--fleet-id", fleet_id)

    assert (code, out) == (1, "")
    assert err == (
        f"fleet {fleet_id} (dev) has no node ready for jobs: {first} (not ready: setup failed: shared-storage), "
        f"{second} (not marked yet); see `gpufleet status dev`, or pass --include-not-ready\n"
    )


def test_status_shows_each_nodes_readiness_in_job_order(spot_fleet, events, run_json, run_cli) -> None:
    fleet_id = spot_fleet(3)
    first, second, third = fleet_nodes(fleet_id)
    mark_readiness([third])
    mark_readiness([first], "not ready: health check failed: gpu-count topology")

    code, document = run_json("status", "dev", "--fleet-id", fleet_id)
    assert code == 0
    assert [(i["instance_id"], i["readiness"]) for i in document["instances"]] == [
        (third, "ready"),
        (first, "not ready: health check failed: gpu-count topology"),
        (second, ""),
    ]
    code, out, _ = run_cli("status", "dev", "--fleet-id", fleet_id)
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("INSTANCE"))
    readiness = slice(header.index("READINESS"), header.index("IMAGE"))
    rows = [(line.split()[0], line[readiness].rstrip()) for line in lines if line.startswith("i-")]
    assert rows == [(third, "ready"), (first, "not ready: health check failed: gpu-count topology"), (second, "-")]
    assert lines[lines.index(header) + 4] == (
        "nodes not ready: the reason is the READINESS column; the full output is on the node "
        "(journalctl -u gpufleet-node-setup) and its console (aws ec2 get-console-output --instance-id ID)"
    )


def test_status_says_nothing_of_readiness_when_every_running_node_is_ready(spot_fleet, events, run_cli) -> None:
    fleet_id = ready_fleet(spot_fleet, 2)

    code, out, _ = run_cli("status", "dev", "--fleet-id", fleet_id)

    assert code == 0
    assert "nodes not ready" not in out


def test_hosts_without_running_instances(spot_fleet, run_cli) -> None:
    fleet_id = spot_fleet(2)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ids = [a["InstanceId"] for a in ec2.describe_spot_fleet_instances(SpotFleetRequestId=fleet_id)["ActiveInstances"]]
    ec2.terminate_instances(InstanceIds=ids)
    code, out, err = run_cli("hosts", "dev", "--fleet-id", fleet_id)
    assert code == 1 and out == ""
    assert err.startswith(f"fleet {fleet_id} (dev) has no running instances") and err.count("\n") == 1


def instance(
    ip: str, minute: int, state: str = "running", image: str = "ami-1", lifecycle: str = "spot", readiness: str = ""
) -> FleetInstance:
    return FleetInstance(
        f"i-{ip}", lifecycle, "us-east-1a", "pg", ip, NOW + dt.timedelta(minutes=minute), state, image, readiness
    )


def test_running_order_is_launch_time_then_numeric_ip() -> None:
    fleet = NodeGroup(
        "sfr-1",
        "active",
        "fulfilled",
        4,
        4,
        0,
        0,
        (
            instance("10.0.0.10", 0),
            instance("10.0.0.9", 0),
            instance("10.0.0.2", 5),
            instance("10.0.0.3", 0, "stopped"),
        ),
    )
    assert [i.private_ip for i in fleet.running] == ["10.0.0.9", "10.0.0.10", "10.0.0.2"]


def test_ready_nodes_come_first_and_among_them_those_ec2_cannot_reclaim() -> None:
    fleet = NodeGroup(
        "sfr-1",
        "active",
        "fulfilled",
        7,
        7,
        1,
        1,
        (
            instance("10.0.0.1", 0, readiness="ready"),
            instance("10.0.0.2", 0, readiness="booting", lifecycle="on-demand"),
            instance("10.0.0.3", 9, readiness="ready", lifecycle="on-demand"),
            instance("10.0.0.4", 0),
            instance("10.0.0.5", 0, readiness="ready"),
            instance("10.0.0.6", 1, readiness="ready", lifecycle="interruptible-capacity-reservation"),
            instance("10.0.0.7", 8, readiness="ready", lifecycle="capacity-block"),
        ),
    )
    assert [i.private_ip for i in fleet.running] == [
        "10.0.0.7",
        "10.0.0.3",
        "10.0.0.1",
        "10.0.0.5",
        "10.0.0.6",
        "10.0.0.2",
        "10.0.0.4",
    ]
    assert [i.private_ip for i in fleet.ready] == ["10.0.0.7", "10.0.0.3", "10.0.0.1", "10.0.0.5", "10.0.0.6"]


def history_record(minutes_ago: int, sub_type: str, instance_id: str) -> dict[str, Any]:
    return {
        "Timestamp": NOW - dt.timedelta(minutes=minutes_ago),
        "EventType": "instanceChange",
        "EventInformation": {"EventSubType": sub_type, "InstanceId": instance_id, "EventDescription": sub_type},
    }


def test_recent_events_pages_and_orders() -> None:
    """Stubber: two pages of DescribeSpotFleetRequestHistory over the last 24 hours, returned oldest first."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    start = NOW - dt.timedelta(hours=24)
    page = {"SpotFleetRequestId": "sfr-1", "StartTime": start, "LastEvaluatedTime": NOW}
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_fleet_request_history",
            {**page, "HistoryRecords": [history_record(5, "launched", "i-2")], "NextToken": "t1"},
            {"SpotFleetRequestId": "sfr-1", "StartTime": start},
        )
        stub.add_response(
            "describe_spot_fleet_request_history",
            {**page, "HistoryRecords": [history_record(50, "terminated", "i-1")]},
            {"SpotFleetRequestId": "sfr-1", "StartTime": start, "NextToken": "t1"},
        )
        events = recent_events(ec2, "sfr-1", NOW)
        stub.assert_no_pending_responses()
    assert [(e.sub_type, e.instance_id) for e in events] == [("terminated", "i-1"), ("launched", "i-2")]


def test_status_without_history_permission_still_reports(spot_fleet, monkeypatch, run_cli) -> None:
    from botocore.exceptions import ClientError

    def denied(ec2: Any, request_id: str, now: dt.datetime) -> list[FleetEvent]:
        raise ClientError(
            {"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "DescribeSpotFleetRequestHistory"
        )

    monkeypatch.setattr(fleet_module, "recent_events", denied)
    code, out, _ = run_cli("status", "dev", "--fleet-id", spot_fleet(1))
    assert code == 0
    assert "events unavailable: access denied to DescribeSpotFleetRequestHistory" in out


def test_images_are_those_of_pending_and_running_nodes() -> None:
    nodes = (
        instance("10.0.0.1", 0, image="ami-new"),
        instance("10.0.0.2", 0, "pending", image="ami-new"),
        instance("10.0.0.3", 0, "terminated", image="ami-old"),
        instance("10.0.0.4", 0, "shutting-down", image="ami-older"),
    )
    assert NodeGroup("sfr-1", "active", "fulfilled", 2, 2, 0, 0, nodes).images == ["ami-new"]
