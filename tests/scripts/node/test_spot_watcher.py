"""spot-watcher.sh against a fake curl playing IMDSv2: the checkpoint hook runs once, on the first notice."""

import json

import pytest

INTERRUPTION = json.dumps({"action": "terminate", "time": "2024-05-01T12:02:00Z"})
REBALANCE = json.dumps({"noticeTime": "2024-05-01T11:50:00Z"})
NOT_YET = [404, ""]


@pytest.fixture
def watch(node, tmp_path):
    hook_log = tmp_path / "hook.log"

    def watch(iterations: int, check: bool = True, **settings: str):
        result = node.run("spot-watcher.sh", check=check, **{
            "GPUFLEET_SPOT_WATCHER": "1",
            "GPUFLEET_IMDS_URL": "http://imds.test",
            "GPUFLEET_POLL_SECONDS": "0",
            "GPUFLEET_WATCH_ITERATIONS": str(iterations),
            "GPUFLEET_CHECKPOINT_HOOK": f'echo "$GPUFLEET_NOTICE_PATH $GPUFLEET_NOTICE" >> {hook_log}',
            **settings,
        })
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
    assert token_requests == [["-fsS", "--max-time", "2", "-X", "PUT", "-H", ttl_header, "http://imds.test/latest/api/token"]]
    for call in metadata_gets(node, "spot/instance-action"):
        assert "X-aws-ec2-metadata-token: token-1" in call


def test_a_restarted_watcher_does_not_run_the_hook_again(node, watch):
    node.set_state(imds={"spot/instance-action": [[200, INTERRUPTION]]})
    watch(iterations=2)

    result, runs = watch(iterations=2)

    assert len(runs) == 1
    assert "checkpoint hook already ran, for spot/instance-action" in result.stdout


def test_rebalance_recommendation_runs_the_hook(node, watch):
    node.set_state(imds={"events/recommendations/rebalance": [NOT_YET, [200, REBALANCE]]})

    _, runs = watch(iterations=5)

    assert runs == [f"events/recommendations/rebalance {REBALANCE}"]


def test_interruption_after_a_rebalance_recommendation_is_logged_without_a_second_run(node, watch):
    node.set_state(imds={
        "events/recommendations/rebalance": [[200, REBALANCE]],
        "spot/instance-action": [NOT_YET, NOT_YET, [200, INTERRUPTION]],
    })

    result, runs = watch(iterations=5)

    assert len(runs) == 1 and runs[0].startswith("events/recommendations/rebalance")
    assert f"notice at spot/instance-action: {INTERRUPTION}" in result.stdout


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


@pytest.mark.parametrize(("name", "value"), [("GPUFLEET_POLL_SECONDS", "soon"), ("GPUFLEET_WATCH_ITERATIONS", "-1"),
                                             ("GPUFLEET_IMDS_TOKEN_TTL_SECONDS", "0")])
def test_bad_setting_is_a_clear_error(node, watch, name, value):
    result, _ = watch(iterations=1, check=False, **{name: value})

    assert result.returncode == 1
    assert name in result.stderr
