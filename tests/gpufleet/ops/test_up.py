"""gpufleet up: the environment it writes, the nodes' progress view, the cost lines (gpufleet/ops/up.py), and the
command's stages on moto with the CDK CLI replaced by a stand-in that records its arguments (gpufleet/commands/up.py).
The whole path on real nodes: tests/box/test_up.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from decimal import Decimal
from pathlib import Path

import boto3
import pytest

from gpufleet.aws import Aws
from gpufleet.errors import GpufleetError
from gpufleet.loading import load_environment
from gpufleet.ops import cdk_cli, preflight
from gpufleet.ops.fleet import FleetEvent, FleetInstance, NodeGroup
from gpufleet.ops.up import Draft, NodesView, cost_lines, node_hours, wait_for_nodes, write_new_file
from tests.gpufleet.ops.test_preflight import create_service_linked_role

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
DRAFT = Draft(
    name="first",
    account="123456789012",
    region="us-west-2",
    availability_zone="us-west-2b",
    instance_type="p5.48xlarge",
    nodes=2,
    on_demand=1,
    storage=True,
    image={"ssm_parameter": "/gpufleet/ami/ubuntu2204-cuda12"},
    options=" --instance-type p5.48xlarge --nodes 2 --on-demand 1",
)
DRAFT_TEXT = """\
# Written by `gpufleet up first` on 2026-12-02 from: --instance-type p5.48xlarge --nodes 2 --on-demand 1
# Edit it freely: `gpufleet up` deploys what it says. The reference: docs/reference/environment.md.
name: first
account: "123456789012"
region: us-west-2
availability_zone: us-west-2b
network:
  cidr: 10.60.0.0/16
  nat_gateway: true
instance_type: p5.48xlarge
capacity:
  target: 2
  on_demand: 1
fleet:
  type: maintain
  allocation_strategy: priceCapacityOptimized
ami: {ssm_parameter: /gpufleet/ami/ubuntu2204-cuda12}
root_volume_gib: 500
node:
  checkpoint_hook: /usr/local/bin/save-checkpoint
# Shared storage at /fsx: /fsx/data is linked to the bucket the storage stack makes (gpufleet down
# --keep-data exports it there, and the next up brings it back).
storage:
  lustre:
    deployment_type: PERSISTENT_2
    storage_capacity_gib: 1200
    throughput_mb_per_tib: 125
  data_repository: {}
"""


# -- the environment file ---------------------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path):
    """A folder of the test's own (the autouse fixtures write into tmp_path)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    return mine


def test_a_draft_is_written_as_this_text_and_loads_as_a_valid_environment(folder):
    path = folder / "first.yaml"

    environment = write_new_file(path, DRAFT.text(NOW), load_environment)

    assert path.read_text() == DRAFT_TEXT
    assert (environment.capacity.target, environment.capacity.on_demand, environment.capacity.spot) == (2, 1, 1)
    assert environment.storage is not None and environment.data_repository_location == (
        "gpufleet-first-123456789012-us-west-2",
        "first",
    )
    assert [entry.name for entry in folder.iterdir()] == ["first.yaml"]


def test_a_draft_without_storage_has_no_storage_section():
    text = Draft(**{**vars(DRAFT), "storage": False}).text(NOW)

    assert "storage" not in text
    assert text == DRAFT_TEXT[: DRAFT_TEXT.index("# Shared storage")]


def test_a_draft_with_a_problem_leaves_no_file_and_its_lines_name_the_file(folder):
    path = folder / "first.yaml"
    text = Draft(**{**vars(DRAFT), "on_demand": 3}).text(NOW)

    with pytest.raises(GpufleetError) as raised:
        write_new_file(path, text, load_environment)

    assert raised.value.problems
    assert all(str(path) in problem for problem in raised.value.problems), raised.value.problems
    assert list(folder.iterdir()) == []


def test_an_existing_file_is_never_replaced(folder):
    path = folder / "first.yaml"
    path.write_text("mine\n")

    with pytest.raises(GpufleetError) as raised:
        write_new_file(path, DRAFT.text(NOW), load_environment)

    assert raised.value.problems == (f"{path}: exists already; gpufleet up uses it as it is",)
    assert path.read_text() == "mine\n"


def test_a_check_only_write_leaves_nothing(folder):
    write_new_file(folder / "first.yaml", DRAFT.text(NOW), load_environment, keep=False)

    assert list(folder.iterdir()) == []


# -- the nodes' progress ------------------------------------------------------------------------------------------


def node(instance_id: str, readiness: str = "", lifecycle: str = "spot", ip: str = "10.60.0.5", state: str = "running"):
    return FleetInstance(
        instance_id=instance_id,
        lifecycle=lifecycle,
        availability_zone="us-west-2b",
        placement_group="gpufleet-first",
        private_ip=ip,
        launch_time=NOW - dt.timedelta(minutes=30),
        state=state,
        image_id="ami-0123",
        readiness=readiness,
    )


def group(*instances: FleetInstance) -> NodeGroup:
    return NodeGroup(
        id="sfr-1",
        state="active",
        activity_status="pending_fulfillment",
        target_capacity=2,
        fulfilled_capacity=float(len(instances)),
        on_demand_target_capacity=1,
        on_demand_fulfilled_capacity=1.0,
        instances=instances,
    )


HEAD, SPOT = "i-0000000000000000a", "i-0000000000000000b"


def test_the_view_prints_a_node_only_when_its_state_changes_and_a_count_when_it_changes():
    view = NodesView(target=2, started=100.0)

    first = view.lines(group(node(HEAD, "", "", "10.60.0.4")), [], 105.0)
    same = view.lines(group(node(HEAD, "", "", "10.60.0.4")), [], 110.0)
    stepped = view.lines(
        group(node(HEAD, "booting: step 2/9 efa-env", "", "10.60.0.4"), node(SPOT, "booting")), [], 171.0
    )
    ready = view.lines(group(node(HEAD, "ready", "", "10.60.0.4"), node(SPOT, "ready")), [], 3725.0)

    assert first == [
        f"  00:05 {HEAD} (on-demand 10.60.0.4): launched, booting the image",
        "  00:05 0 of 2 nodes ready, 1 not launched yet",
    ]
    assert same == []
    assert stepped == [
        f"  01:11 {HEAD} (on-demand 10.60.0.4): booting: step 2/9 efa-env",
        f"  01:11 {SPOT} (spot 10.60.0.5): booting",
        "  01:11 0 of 2 nodes ready",
    ]
    assert ready == [
        f"  60:25 {HEAD} (on-demand 10.60.0.4): ready",
        f"  60:25 {SPOT} (spot 10.60.0.5): ready",
        "  60:25 2 of 2 nodes ready",
    ]


def test_the_view_says_when_a_node_is_gone_or_not_ready_and_prints_each_event_once():
    view = NodesView(target=2, started=0.0)
    event = FleetEvent(NOW, "error", "launchSpecUnusable", "", "insufficient capacity in us-west-2b")
    view.lines(group(node(HEAD, "ready", ""), node(SPOT, "booting")), [], 1.0)

    lines = view.lines(group(node(HEAD, "not ready: health check failed: efa", "")), [event], 2.0)
    again = view.lines(group(node(HEAD, "not ready: health check failed: efa", "")), [event], 3.0)

    assert lines == [
        "  00:02 fleet sfr-1: error launchSpecUnusable insufficient capacity in us-west-2b",
        f"  00:02 {HEAD} (on-demand 10.60.0.5): not ready: health check failed: efa",
        f"  00:02 {SPOT}: no longer running",
        "  00:02 0 of 2 nodes ready, 1 not launched yet, 1 not ready",
    ]
    assert again == []


def test_a_pending_node_is_not_shown_until_it_runs_with_an_address():
    view = NodesView(target=1, started=0.0)

    assert view.lines(group(node(HEAD, state="pending")), [], 0.0) == ["  00:00 0 of 1 nodes ready, 1 not launched yet"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def waiting(answers: list[NodeGroup], timeout: float = 60.0, target: int = 2):
    clock = Clock()
    echoed: list[str] = []
    looks = iter(answers)

    def describe():
        return next(looks), []

    outcome = wait_for_nodes(describe, target, timeout, echoed.append, poll_seconds=5, clock=clock, sleep=clock.sleep)
    return outcome, clock, echoed


def test_waiting_ends_as_soon_as_the_target_is_ready():
    outcome, clock, _ = waiting([group(node(HEAD, "booting", "")), group(node(HEAD, "ready", ""), node(SPOT, "ready"))])

    assert [instance.instance_id for instance in outcome.ready] == [HEAD, SPOT]
    assert (outcome.not_ready, outcome.missing, clock.sleeps) == ((), 0, [5])


def test_waiting_ends_once_every_node_settled_even_with_one_not_ready():
    outcome, clock, _ = waiting([group(node(HEAD, "ready", ""), node(SPOT, "not ready: setup failed: efa-env"))])

    assert [instance.instance_id for instance in outcome.not_ready] == [SPOT]
    assert clock.sleeps == []


def test_waiting_goes_on_while_a_node_is_missing_until_the_timeout():
    booting = group(node(HEAD, "ready", ""))
    outcome, clock, _ = waiting([booting] * 20, timeout=10.0)

    # 0 s: look; 5 s: look; 10 s: look, and 10 s is the timeout.
    assert clock.sleeps == [5, 5]
    assert (len(outcome.ready), outcome.missing) == (1, 1)


def test_waiting_looks_again_just_before_the_timeout():
    outcome, clock, _ = waiting([group(node(HEAD, "ready", ""))] * 20, timeout=10.5)

    assert clock.sleeps == [5, 5, 5]


# -- what it cost -------------------------------------------------------------------------------------------------


def test_node_hours_count_each_market_from_launch_time():
    hours = node_hours([node(HEAD, lifecycle=""), node(SPOT), node("i-c", lifecycle="spot")], NOW)

    assert hours == {"on-demand": Decimal("0.5"), "spot": Decimal("1.0")}


def test_cost_lines_price_the_hours_and_say_what_else_bills():
    lines = cost_lines(
        {"on-demand": Decimal("0.5"), "spot": Decimal("1.0")},
        {"on-demand": Decimal("55.04"), "spot": Decimal("20.10")},
        Decimal("75.14"),
        True,
    )

    assert lines == [
        "cost so far: $47.62 for 1.50 node-hours since the first node launched",
        "while it is up: $75.14 per hour for the nodes, plus the NAT gateway, the endpoints and the file system "
        "(`gpufleet cost` for the lines; `gpufleet down` stops all of it)",
    ]


def test_cost_lines_name_a_market_without_a_price():
    lines = cost_lines({"spot": Decimal("2")}, {"spot": None}, Decimal("0"), False)

    assert lines[0] == "cost so far: $0.00 for 2.00 node-hours since the first node launched (no price for spot nodes)"
    assert lines[1].startswith("while it is up: $0.00 per hour for the nodes (some prices unknown), plus")


# -- the CDK CLI --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "needed"), [(None, True), ("5", True), ("6", False), ("29", False), ("x", True), ("", True)]
)
def test_the_bootstrap_is_needed_below_version_6(version, needed):
    assert cdk_cli.bootstrap_needed(version) is needed


def test_the_project_root_needs_the_cdk_app(tmp_path):
    (tmp_path / "cdk.json").write_text("{}")

    with pytest.raises(GpufleetError) as raised:
        cdk_cli.project_root(tmp_path)

    assert raised.value.problems == (
        f"{tmp_path}: no app.py here: run gpufleet up and down from the root of the gpufleet checkout, where the CDK "
        "app is",
    )


def test_without_the_pinned_cli_the_fix_is_make_setup(tmp_path, monkeypatch):
    monkeypatch.delenv(cdk_cli.CDK_VARIABLE, raising=False)

    with pytest.raises(GpufleetError) as raised:
        cdk_cli.cdk_command(tmp_path)

    assert raised.value.problems == (
        f"{tmp_path}/node_modules/.bin/cdk: the pinned CDK CLI is not installed: run `make setup` in {tmp_path} (it "
        "runs npm ci), or set GPUFLEET_CDK to a CDK CLI's command line",
    )


# -- the command on moto ------------------------------------------------------------------------------------------

STAND_IN = """\
import json, sys
from pathlib import Path
log = Path(sys.argv[1])
with log.open("a") as calls:
    calls.write(json.dumps(sys.argv[2:]) + "\\n")
print("stand-in: " + " ".join(sys.argv[2:4]))
sys.exit(int(Path(sys.argv[1] + ".status").read_text()) if Path(sys.argv[1] + ".status").exists() else 0)
"""


@pytest.fixture
def cdk(tmp_path, monkeypatch):
    """The CDK CLI's stand-in: records each call's arguments; `cdk.fail(N)` makes the next calls exit N."""
    script = tmp_path / "cdk_stand_in.py"
    script.write_text(STAND_IN)
    log = tmp_path / "cdk-calls.jsonl"
    monkeypatch.setenv(cdk_cli.CDK_VARIABLE, f"{sys.executable} {script} {log}")
    project = tmp_path / "checkout"
    project.mkdir()
    for name in cdk_cli.PROJECT_FILES:
        (project / name).write_text("")
    monkeypatch.chdir(project)

    class Cdk:
        @staticmethod
        def calls() -> list[list[str]]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        @staticmethod
        def fail(status: int) -> None:
            Path(f"{log}.status").write_text(str(status))

    return Cdk


@pytest.fixture
def scores(monkeypatch):
    """Placement scores by AZ id, served instead of moto's missing GetSpotPlacementScores."""
    by_zone_id: dict[str, int] = {}
    monkeypatch.setattr(preflight, "placement_scores", lambda ec2, instance_type, region, capacity: by_zone_id)
    return by_zone_id


# AWS publishes it in every region (gpufleet/deep_learning_ami.py); SSM's PutParameter refuses names under /aws, so moto
# cannot hold it: PublicParameters answers for it.
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"


class PublicParameters:
    """moto's SSM client, with GetParameter of the public parameters AWS publishes answered from PUBLISHED."""

    def __init__(self, client, published: dict[str, str]) -> None:
        self.client, self.published = client, published

    def get_parameter(self, **arguments):
        name = arguments["Name"]
        if name in self.published:
            return {"Parameter": {"Name": name, "Type": "String", "Value": self.published[name], "Version": 1}}
        return self.client.get_parameter(**arguments)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


@pytest.fixture
def account(moto, node_image_id, scores, monkeypatch):
    """An account where preflight passes for p4d in us-east-1: the image parameter, the Spot service-linked roles,
    placement scores for every AZ."""
    public = {DLAMI_PARAMETER: node_image_id}
    real_client = Aws.client

    def client(self: Aws, service: str):
        made = real_client(self, service)
        return PublicParameters(made, public) if service == "ssm" else made

    monkeypatch.setattr(Aws, "client", client)
    for parameter in ("/gpufleet/ami/ubuntu2204-cuda12", "/gpufleet/ami/p4d-ubuntu1804-cuda11"):
        boto3.client("ssm", region_name="us-east-1").put_parameter(
            Name=parameter, Value=node_image_id, Type="String", DataType="aws:ec2:image"
        )
    create_service_linked_role("AWSServiceRoleForEC2SpotFleet", "spotfleet.amazonaws.com")
    create_service_linked_role("AWSServiceRoleForEC2Spot", "spot.amazonaws.com")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    for zone in zones:
        scores[zone["ZoneId"]] = 9 if zone["ZoneName"] == "us-east-1c" else 3
    return node_image_id


def stages(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[")]


def environments_dir() -> Path:
    return Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"])


def test_a_new_environment_is_written_in_the_best_zone_then_checked_and_the_account_bootstrapped(account, cdk, run_cli):
    cdk.fail(7)  # the bootstrap fails: what came before it is what this test reads

    code, out, err = run_cli("up", "first", "--instance-type", "p4d.24xlarge", "--nodes", "3", "--no-storage")

    path = environments_dir() / "first.yaml"
    assert code == 1
    assert err.splitlines()[-1] == "cdk bootstrap failed (exit status 7): its messages are above"
    assert stages(out) == [
        f"[1/6] environment: wrote {path} (3 x p4d.24xlarge, 1 on-demand and 2 spot, in us-east-1c)",
        stages(out)[1],
        "[3/6] CDK bootstrap: aws://123456789012/us-east-1 (none yet): cdk bootstrap",
    ]
    assert stages(out)[1].startswith("[2/6] preflight: ") and stages(out)[1].endswith(" 0 failed")
    zone_line = next(line for line in out.splitlines() if line.startswith("  zone: "))
    assert zone_line.startswith("  zone: us-east-1c (use1-az")
    assert zone_line.endswith("), spot placement score 9; 4 zones offer it")
    assert "  cdk | stand-in: bootstrap aws://123456789012/us-east-1" in out.splitlines()
    assert cdk.calls() == [["bootstrap", "aws://123456789012/us-east-1"]]
    written = path.read_text()
    assert "availability_zone: us-east-1c\n" in written and "\nstorage:" not in written
    assert written.splitlines()[0] == (
        "# Written by `gpufleet up first` on "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d} from: --instance-type p4d.24xlarge --nodes 3 --on-demand 1 --no-storage"
    )


def test_a_bootstrapped_account_is_not_bootstrapped_again_and_the_environment_is_deployed(account, cdk, run_cli):
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/cdk-bootstrap/hnb659fds/version", Value="29", Type="String"
    )
    cdk.fail(1)

    code, out, err = run_cli("up", "dev")

    assert code == 1, out + err
    assert stages(out)[2:] == [
        "[3/6] CDK bootstrap: aws://123456789012/us-east-1 has version 29",
        "[4/6] deploy: the stacks of dev (cdk deploy)",
    ]
    assert cdk.calls() == [cdk_cli.deploy_arguments("dev")]
    assert cdk_cli.deploy_arguments("dev") == [
        "deploy",
        "--all",
        "-c",
        "env=dev",
        "--require-approval",
        "never",
        "--import-existing-resources",
        "--progress",
        "events",
    ]


def test_options_that_differ_from_an_existing_file_are_refused_before_any_call(cdk, run_cli):
    code, out, err = run_cli("up", "dev", "--instance-type", "p5.48xlarge", "--nodes", "2", "--az", "us-east-1b")

    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "--instance-type p5.48xlarge: environments/dev.yaml says p4d.24xlarge; edit the file, or leave the option out",
        "--az us-east-1b: environments/dev.yaml says us-east-1a; edit the file, or leave the option out",
    ]
    assert cdk.calls() == []


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        ((), ["{path}: no such file: pass --instance-type (and --nodes, ...) for gpufleet up to write it"]),
        (
            ("--instance-type", "p4d.24xlarge", "--nodes", "0"),
            ["--nodes 0: must be 1 or more", "--on-demand 0: must be 0 to --nodes (0)"][:1],
        ),
        (
            ("--instance-type", "p4d.24xlarge", "--nodes", "2", "--on-demand", "3"),
            ["--on-demand 3: must be 0 to --nodes (2)"],
        ),
        (("--instance-type", "p4d.24xlarge", "--on-demand", "-1"), ["--on-demand -1: must be 0 to --nodes (2)"]),
    ],
)
def test_bad_options_for_a_new_environment_are_each_one_line(cdk, run_cli, options, problems):
    code, out, err = run_cli("up", "first", *options)

    path = environments_dir() / "first.yaml"
    assert (code, out) == (2, "")
    assert err.splitlines() == [problem.format(path=path) for problem in problems]
    assert not path.exists()


def test_an_unknown_instance_type_names_the_catalog(cdk, run_cli):
    code, _, err = run_cli("up", "first", "--instance-type", "p9.huge")

    assert code == 2
    assert err.startswith("--instance-type p9.huge: not in gpufleet's catalog; one of ")
    assert "p5.48xlarge" in err


def test_a_failing_preflight_stops_before_the_cdk_cli(moto, node_image_id, scores, cdk, run_cli):
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name="/gpufleet/ami/p4d-ubuntu1804-cuda11", Value=node_image_id, Type="String", DataType="aws:ec2:image"
    )

    code, out, err = run_cli("up", "dev")

    assert code == 1
    assert stages(out)[-1].startswith("[2/6] preflight: ")
    assert "  fail service-roles: AWSServiceRoleForEC2SpotFleet is missing" in out
    assert err.splitlines() == ["gpufleet up dev: preflight failed: fix the lines above, then run gpufleet up again"]
    assert cdk.calls() == []


def test_a_file_of_another_account_is_refused_before_any_change(moto, cdk, environments, run_cli):
    path = environments_dir() / "dev.yaml"
    path.write_text(path.read_text().replace('account: "123456789012"', 'account: "210987654321"'))

    code, out, err = run_cli("up", "dev")

    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"{path}: account: 210987654321 is not the account of your AWS credentials (123456789012): set account: "
        '"123456789012" in the file, or use credentials for 210987654321'
    ]
    assert cdk.calls() == []


@pytest.mark.parametrize("minutes", [0, 1441])
def test_the_wait_is_1_to_1440_minutes(cdk, run_cli, minutes):
    code, _, err = run_cli("up", "dev", "--wait-minutes", str(minutes))

    assert (code, err) == (2, f"--wait-minutes {minutes}: must be 1 to 1440\n")
