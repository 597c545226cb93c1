"""node-ready.sh on a fake node: IMDSv2 (fake curl), the AWS CLI (fake aws, which keeps the instance's tags) and the
health check installed where the user data puts scripts/ops (a fake that prints PASS/FAIL lines)."""

import pytest

from tests.scripts.fake_bin import install_fakes
from tests.scripts.node.conftest import FAKE_COMMANDS

INSTANCE = "i-0123456789abcdef0"
TAG = "gpufleet:readiness"
FAILING = (
    "PASS driver: driver 535.104.05 (image manifest: 535.104.05)\n"
    "FAIL gpu-count: 7 GPUs visible (expected 8)\n"
    "FAIL topology: topo-check p4d.24xlarge: GPU3 has no NIC\n"
    "node unhealthy: 2 check(s) failed"
)


def install_health_check(node) -> None:
    """The health check at /opt/gpufleet/ops/node-health-check.sh under the node's root: the fake of
    fake_commands.py, which logs its call and answers from the state."""
    ops = node.root / "opt/gpufleet/ops"
    ops.mkdir(parents=True, exist_ok=True)
    install_fakes(ops, FAKE_COMMANDS, ("node-health-check",))
    (ops / "node-health-check").rename(ops / "node-health-check.sh")


@pytest.fixture
def ready(node):
    """A node with IMDS, the AWS CLI and the health check; ready(**settings) runs node-ready.sh."""
    install_fakes(node.bin_dir, FAKE_COMMANDS, ("aws",))
    install_health_check(node)
    node.set_state(imds={"instance-id": [[200, INSTANCE]], "placement/region": [[200, "us-east-1"]]})

    def ready(*args: str, check: bool = False, **settings: str):
        return node.run(
            "node-ready.sh",
            check=check,
            args=args,
            GPUFLEET_READINESS_TAG=TAG,
            GPUFLEET_IMDS_URL="http://imds.test",
            **settings,
        )

    return ready


def tags(node) -> dict[str, str]:
    return node.state.get("instance_tags", {}).get(INSTANCE, {})


def create_tags_call(value: str) -> list[str]:
    return [
        "ec2",
        "create-tags",
        "--region",
        "us-east-1",
        "--resources",
        INSTANCE,
        "--tags",
        f'[{{"Key": "gpufleet:readiness", "Value": "{value}"}}]',
    ]


def test_a_healthy_node_marks_itself_ready(node, ready):
    result = ready()

    assert result.returncode == 0, result.stderr
    assert tags(node) == {TAG: "ready"}
    assert node.calls("aws") == [create_tags_call("ready")]
    assert result.stdout.splitlines() == [
        "node-ready: running /opt/gpufleet/ops/node-health-check.sh",
        "PASS gpu-count: 8 GPUs visible (expected 8)",
        "node healthy",
        f"node-ready: {INSTANCE}: gpufleet:readiness=ready",
    ]


def test_a_failing_check_marks_the_node_not_ready_with_the_failing_checks(node, ready):
    node.set_state(**node.state, health_output=FAILING, health_exit=1)

    result = ready()

    assert result.returncode == 1
    assert tags(node) == {TAG: "not ready: health check failed: gpu-count topology"}
    # The checks' own lines go to the journal and the console, where the tag points.
    assert "FAIL topology: topo-check p4d.24xlarge: GPU3 has no NIC" in result.stdout.splitlines()
    assert "node-ready: error: not ready: health check failed: gpu-count topology" in result.stderr.splitlines()


def test_a_check_that_fails_without_naming_a_check_gives_its_exit_status(node, ready):
    node.set_state(**node.state, health_output="GPUFLEET_EFA_COUNT is not set", health_exit=2)

    assert ready().returncode == 1
    assert tags(node) == {TAG: "not ready: health check failed: exit status 2"}


def test_a_check_that_timed_out_says_so(node, ready):
    node.set_state(**node.state, health_output="", health_exit=124)  # timeout(1)'s status when the time ran out

    assert ready().returncode == 1
    assert tags(node) == {TAG: "not ready: health check timed out after 300s"}


def test_an_earlier_setup_step_that_failed_keeps_the_node_from_being_ready_and_skips_the_check(node, ready):
    result = ready(GPUFLEET_FAILED_SETUP_STEPS="raid0-nvme shared-storage")

    assert result.returncode == 1
    assert tags(node) == {TAG: "not ready: setup failed: raid0-nvme shared-storage"}
    assert node.calls("node-health-check") == []


def test_without_the_health_check_the_node_is_not_ready(node, ready):
    (node.root / "opt/gpufleet/ops/node-health-check.sh").unlink()

    assert ready().returncode == 1
    assert tags(node) == {TAG: "not ready: no health check at /opt/gpufleet/ops/node-health-check.sh"}


def test_booting_marks_the_node_booting_and_runs_no_check(node, ready):
    result = ready("--booting")

    assert result.returncode == 0, result.stderr
    assert tags(node) == {TAG: "booting"}
    assert node.calls("node-health-check") == []


def test_booting_with_a_step_marks_the_step_that_starts(node, ready):
    result = ready("--booting", "4/9 shared-storage")

    assert result.returncode == 0, result.stderr
    assert tags(node) == {TAG: "booting: step 4/9 shared-storage"}
    assert node.calls("node-health-check") == []


@pytest.mark.parametrize(
    "args",
    [
        ("--booting", "shared-storage"),
        ("--booting", "4/9"),
        ("--booting", "4/9 Shared"),
        ("--booting", "4/9 a b"),
        ("--booting", "4/9 x", "extra"),
        ("4/9 x",),
        ("check", "4/9 x"),
    ],
)
def test_a_malformed_step_or_extra_argument_is_refused_and_nothing_is_marked(node, ready, args):
    result = ready(*args)

    assert result.returncode == 1
    assert tags(node) == {}


def test_characters_a_tag_value_cannot_hold_become_spaces_and_the_value_is_cut_at_256(node, ready):
    steps = "mig,gpu-clocks (x) " + "a" * 300
    ready(GPUFLEET_FAILED_SETUP_STEPS=steps)

    value = tags(node)[TAG]
    assert value.startswith("not ready: setup failed: mig gpu-clocks x aaa")
    assert len(value) == 256


def test_without_the_aws_cli_nothing_is_marked_and_the_run_fails(node, ready):
    (node.bin_dir / "aws").unlink()

    result = ready()

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "node-ready: error: no AWS CLI on this node (aws is not on PATH): cannot set gpufleet:readiness=ready"
    ]


def test_a_refused_tag_fails_the_run(node, ready):
    node.set_state(**node.state, aws_exit=254)

    result = ready()

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"node-ready: error: could not tag {INSTANCE} gpufleet:readiness=ready (see the AWS CLI's message above)"
    )


def test_without_imds_nothing_is_marked(node, ready):
    node.set_state(imds={})

    result = ready()

    assert result.returncode == 1
    assert node.calls("aws") == []
    assert result.stderr.splitlines()[-1] == (
        "node-ready: error: cannot read the instance id and region from http://imds.test: "
        "cannot set gpufleet:readiness=ready"
    )


def test_an_unknown_argument_is_refused(ready):
    result = ready("--now")

    assert (result.returncode, result.stderr) == (1, "node-ready: error: usage: node-ready.sh [--booting [STEP]]\n")
