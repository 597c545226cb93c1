"""spot-watcher.sh against a fake curl playing IMDSv2: the checkpoint hook runs at most once per kind of notice."""

import json

import pytest

# The bodies IMDS serves (EC2 user guide: spot-instance-termination-notices, rebalance-recommendations).
INTERRUPTION = json.dumps({"action": "terminate", "time": "2024-05-01T12:02:00Z"})
REBALANCE = json.dumps({"noticeTime": "2024-05-01T11:50:00Z"})
NOT_YET = [404, "<html><body><h1>404 - Not Found</h1></body></html>"]  # IMDS sends an HTML page


def from_poll(poll: int, body: str) -> list[list]:
    """A notice that is not there before poll number `poll` (1-based) and stays from then on."""
    return [NOT_YET] * (poll - 1) + [[200, body]]


@pytest.fixture
def watch(node, tmp_path):
    hook_log = tmp_path / "hook.log"

    def watch(iterations: int, check: bool = True, **settings: str):
        result = node.run(
            "spot-watcher.sh",
            check=check,
            **{
                "GPUFLEET_SPOT_WATCHER": "1",
                "GPUFLEET_IMDS_URL": "http://imds.test",
                "GPUFLEET_POLL_SECONDS": "0",
                "GPUFLEET_WATCH_ITERATIONS": str(iterations),
                "GPUFLEET_CHECKPOINT_HOOK": f'echo "$GPUFLEET_NOTICE_PATH $GPUFLEET_NOTICE" >> {hook_log}',
                **settings,
            },
        )
        runs = hook_log.read_text().splitlines() if hook_log.exists() else []
        return result, runs

    return watch


def metadata_gets(node, path: str) -> list[list[str]]:
    return [call for call in node.calls("curl") if call[-1] == f"http://imds.test/latest/meta-data/{path}"]


def test_interruption_notice_runs_the_hook_exactly_once(node, watch):
    node.set_state(imds={"spot/instance-action": [NOT_YET, NOT_YET, NOT_YET, [200, INTERRUPTION]]})

    result, runs = watch(iterations=8)

    assert runs == [f"spot/instance-action {INTERRUPTION}"]
    assert len(metadata_gets(node, "spot/instance-action")) == 8
    assert result.stdout.count("notice at spot/instance-action") == 1


def test_token_is_sent_with_every_request(node, watch):
    node.set_state(imds={})

    watch(iterations=3)

    token_requests = [call for call in node.calls("curl") if call[-1].endswith("/latest/api/token")]
    ttl_header = "X-aws-ec2-metadata-token-ttl-seconds: 21600"
    assert token_requests == [
        ["-fsS", "--max-time", "2", "-X", "PUT", "-H", ttl_header, "http://imds.test/latest/api/token"]
    ]
    for call in metadata_gets(node, "spot/instance-action"):
        assert "X-aws-ec2-metadata-token: token-1" in call


def test_a_restarted_watcher_does_not_run_the_hook_again(node, watch):
    node.set_state(imds={"spot/instance-action": [[200, INTERRUPTION]]})
    watch(iterations=2)

    result, runs = watch(iterations=2)

    assert len(runs) == 1
    assert f"checkpoint hook already ran for spot/instance-action: {INTERRUPTION}" in result.stdout


def test_rebalance_recommendation_runs_the_hook(node, watch):
    node.set_state(imds={"events/recommendations/rebalance": [NOT_YET, [200, REBALANCE]]})

    _, runs = watch(iterations=5)

    assert runs == [f"events/recommendations/rebalance {REBALANCE}"]


def test_interruption_after_a_rebalance_recommendation_runs_the_hook_again(node, watch):
    """Rebalance at poll 2, interruption at poll 5: one run for each, none on the polls after."""
    node.set_state(
        imds={
            "events/recommendations/rebalance": from_poll(2, REBALANCE),
            "spot/instance-action": from_poll(5, INTERRUPTION),
        }
    )

    result, runs = watch(iterations=9)

    assert runs == [f"events/recommendations/rebalance {REBALANCE}", f"spot/instance-action {INTERRUPTION}"]
    # Watching went on after the rebalance recommendation, and past the interruption notice.
    assert len(metadata_gets(node, "spot/instance-action")) == 9
    assert len(metadata_gets(node, "events/recommendations/rebalance")) == 9
    assert result.stdout.count("running checkpoint hook") == 2
    assert "already ran" not in result.stdout


def test_a_restarted_watcher_still_runs_the_hook_for_the_interruption(node, watch):
    node.set_state(imds={"events/recommendations/rebalance": [[200, REBALANCE]]})
    watch(iterations=2)
    node.set_state(
        imds={
            "events/recommendations/rebalance": [[200, REBALANCE]],
            "spot/instance-action": from_poll(2, INTERRUPTION),
        }
    )

    result, runs = watch(iterations=3)

    assert runs == [f"events/recommendations/rebalance {REBALANCE}", f"spot/instance-action {INTERRUPTION}"]
    assert f"checkpoint hook already ran for events/recommendations/rebalance: {REBALANCE}" in result.stdout


@pytest.mark.parametrize("rebalance_poll", [1, 3], ids=["together", "rebalance-later"])
def test_no_rebalance_run_once_the_interruption_ran(node, watch, rebalance_poll):
    """AWS: the recommendation can arrive along with the interruption notice; the hook then runs only for the
    interruption, which is polled first."""
    node.set_state(
        imds={
            "spot/instance-action": [[200, INTERRUPTION]],
            "events/recommendations/rebalance": from_poll(rebalance_poll, REBALANCE),
        }
    )

    result, runs = watch(iterations=4)

    assert runs == [f"spot/instance-action {INTERRUPTION}"]
    assert f"notice at events/recommendations/rebalance: {REBALANCE}" in result.stdout
    assert (
        "checkpoint hook already ran for spot/instance-action; not running it for events/recommendations/rebalance"
        in result.stdout
    )


def test_no_notice_no_hook(node, watch):
    node.set_state(imds={})

    result, runs = watch(iterations=5)

    assert runs == []
    assert len(metadata_gets(node, "spot/instance-action")) == 5
    assert len(metadata_gets(node, "events/recommendations/rebalance")) == 5
    assert "notice" not in result.stdout.replace("notices", "")


def test_without_a_hook_notices_are_still_logged(node, watch):
    node.set_state(imds={"spot/instance-action": [[200, INTERRUPTION]]})

    result, runs = watch(iterations=3, GPUFLEET_CHECKPOINT_HOOK="")

    assert runs == []
    assert f"notice at spot/instance-action: {INTERRUPTION}" in result.stdout
    assert "no checkpoint hook configured" in result.stdout


def test_token_is_refreshed_before_it_expires(node, watch):
    node.set_state(imds={})

    watch(iterations=4, GPUFLEET_IMDS_TOKEN_TTL_SECONDS="1")

    assert node.state["tokens_issued"] == 4


def test_expired_token_is_replaced(node, watch):
    node.set_state(imds={"spot/instance-action": [[401, ""], NOT_YET]})

    watch(iterations=3)

    assert node.state["tokens_issued"] == 2


def test_failing_hook_is_logged_and_watching_goes_on(node, watch):
    node.set_state(imds={"spot/instance-action": [[200, INTERRUPTION]]})

    result, _ = watch(iterations=3, GPUFLEET_CHECKPOINT_HOOK="exit 3")

    assert "checkpoint hook failed with exit status 3" in result.stdout
    assert len(metadata_gets(node, "spot/instance-action")) == 3


def test_disabled_exits_at_once(node, watch):
    result, _ = watch(iterations=3, GPUFLEET_SPOT_WATCHER="0")

    assert "disabled" in result.stdout
    assert node.calls() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("GPUFLEET_POLL_SECONDS", "soon"), ("GPUFLEET_WATCH_ITERATIONS", "-1"), ("GPUFLEET_IMDS_TOKEN_TTL_SECONDS", "0")],
)
def test_bad_setting_is_a_clear_error(node, watch, name, value):
    result, _ = watch(iterations=1, check=False, **{name: value})

    assert result.returncode == 1
    assert name in result.stderr


# Auto Scaling nodes (fleet.backend auto-scaling): the target lifecycle state (EC2 Auto Scaling user guide,
# retrieving-target-lifecycle-state-through-imds) is InService until the group terminates the node.
LIFECYCLE = "autoscaling/target-lifecycle-state"
GROUP_SETTINGS = {"GPUFLEET_LIFECYCLE_HOOK": "gpufleet-checkpoint", "GPUFLEET_AUTO_SCALING_GROUP": "gpufleet-lab-nodes"}
NODE_METADATA = {
    "instance-id": [[200, "i-0123456789abcdef0"]],
    "placement/region": [[200, "us-east-1"]],
    "ami-id": [[200, "ami-0fedcba9876543210"]],
}


def complete_call(group: str) -> list[str]:
    return [
        "autoscaling",
        "complete-lifecycle-action",
        "--region",
        "us-east-1",
        "--auto-scaling-group-name",
        group,
        "--lifecycle-hook-name",
        "gpufleet-checkpoint",
        "--instance-id",
        "i-0123456789abcdef0",
        "--lifecycle-action-result",
        "CONTINUE",
    ]


@pytest.fixture
def aws_cli(node):
    from tests.scripts.fake_bin import install_fakes
    from tests.scripts.node.conftest import FAKE_COMMANDS

    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))


def test_a_terminating_group_node_checkpoints_once_then_completes_the_lifecycle_action(node, watch, aws_cli):
    node.set_state(imds={LIFECYCLE: [[200, "InService"]] * 2 + [[200, "Terminated"]], **NODE_METADATA})

    result, runs = watch(iterations=5, **GROUP_SETTINGS)

    assert runs == [f"{LIFECYCLE} Terminated"]
    assert node.calls("aws") == [complete_call("gpufleet-lab-nodes")]
    assert "notice at autoscaling/target-lifecycle-state: InService" not in result.stdout


def test_a_replace_all_group_is_named_after_the_nodes_image(node, watch, aws_cli):
    node.set_state(imds={LIFECYCLE: [[200, "Terminated"]], **NODE_METADATA})

    watch(iterations=2, GPUFLEET_GROUP_NAME_HAS_IMAGE="1", **GROUP_SETTINGS)

    assert node.calls("aws") == [complete_call("gpufleet-lab-nodes-ami-0fedcba9876543210")]


def test_without_the_aws_cli_the_termination_waits_for_the_hook_timeout(node, watch):
    """The images' usual case (the AMI profiles install no AWS CLI): one line says so, however long the node stays
    Terminated, and the hook still ran."""
    node.set_state(imds={LIFECYCLE: [[200, "InService"], [200, "Terminated"]], **NODE_METADATA})

    result, runs = watch(iterations=5, **GROUP_SETTINGS)

    assert runs == [f"{LIFECYCLE} Terminated"]
    assert node.calls("aws") == []
    assert [line for line in result.stdout.splitlines() if "AWS CLI" in line] == [
        "spot-watcher: no AWS CLI on this node (aws is not on PATH): cannot complete the lifecycle action of hook "
        "gpufleet-checkpoint, so the termination waits for the hook's heartbeat timeout"
    ]


def test_a_spot_interruption_in_a_group_checkpoints_once_and_still_completes_the_action(node, watch, aws_cli):
    node.set_state(
        imds={
            INTERRUPTION_PATH: [[200, INTERRUPTION]],
            LIFECYCLE: [NOT_YET_STATE, [200, "Terminated"]],
            **NODE_METADATA,
        }
    )

    result, runs = watch(iterations=3, **GROUP_SETTINGS)

    assert runs == [f"spot/instance-action {INTERRUPTION}"]
    assert f"checkpoint hook already ran for spot/instance-action; not running it for {LIFECYCLE}" in result.stdout
    assert node.calls("aws") == [complete_call("gpufleet-lab-nodes")]


INTERRUPTION_PATH = "spot/instance-action"
NOT_YET_STATE = [200, "InService"]


def test_a_spot_fleet_node_never_asks_for_the_lifecycle_state(node, watch):
    node.set_state(imds={LIFECYCLE: [[200, "Terminated"]]})

    _, runs = watch(iterations=2)

    assert runs == [] and metadata_gets(node, LIFECYCLE) == []


def test_a_lifecycle_hook_without_its_group_is_refused(node, watch):
    result, _ = watch(iterations=1, check=False, GPUFLEET_LIFECYCLE_HOOK="gpufleet-checkpoint")
    assert (result.returncode, result.stderr) == (
        1,
        "spot-watcher: error: GPUFLEET_AUTO_SCALING_GROUP is not set (from /etc/gpufleet/node.env)\n",
    )
