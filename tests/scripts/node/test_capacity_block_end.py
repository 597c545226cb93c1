"""capacity-block-end.sh: the checkpoint hook runs once per block end, on the nodes of that block only; and the
command the EventBridge rule sends through Run Command (its input template, filled as EventBridge fills it)
runs it with the node's settings."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.environment import Environment
from gpufleet.user_data import INSTALL_DIR, SETTINGS_FILE, render_user_data
from stacks.constructs.capacity_block_warning import node_command
from tests.scripts.node.conftest import SCRIPTS_DIR
from tests.stacks.constructs.conftest import ENVIRONMENT

BLOCK = "cr-0123456789abcdef0"
# The block's dates (required in capacity.capacity_block); the script is given the end by the expiration warning.
BLOCK_DATES = {"start": "2099-01-05T11:30:00Z", "end": "2099-01-12T11:30:00Z"}
END = "2026-11-27T11:30:00Z"


@pytest.fixture
def end_of_block(node, tmp_path):
    hook_log = tmp_path / "hook.log"

    def run(*args: str, check: bool = True, **settings: str):
        env = {
            "PATH": f"{node.bin_dir}:/usr/bin:/bin",
            "GPUFLEET_ROOT": str(node.root),
            "GPUFLEET_CAPACITY_BLOCK": BLOCK,
            "GPUFLEET_CHECKPOINT_HOOK": f'echo "$GPUFLEET_NOTICE_PATH $GPUFLEET_NOTICE" >> {hook_log}',
            **settings,
        }
        result = subprocess.run(
            [str(SCRIPTS_DIR / "capacity-block-end.sh"), *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert (result.returncode == 0) == check, result.stdout + result.stderr
        runs = hook_log.read_text().splitlines() if hook_log.exists() else []
        return result, runs

    return run


def test_the_warning_for_the_nodes_block_runs_the_hook(end_of_block, tmp_path):
    result, runs = end_of_block(BLOCK, END)

    assert runs == [f"capacity-block-expiration {END}"]
    assert result.stdout.splitlines() == [
        f"capacity-block-end: Capacity Block {BLOCK} ends 2026-11-27 11:30:00 UTC; EC2 terminates its instances "
        "from 30 minutes before that",
        f'capacity-block-end: running checkpoint hook: echo "$GPUFLEET_NOTICE_PATH $GPUFLEET_NOTICE" >> '
        f"{tmp_path / 'hook.log'}",
        "capacity-block-end: checkpoint hook finished",
    ]


def test_a_second_warning_does_not_run_the_hook_again(end_of_block):
    end_of_block(BLOCK, END)

    result, runs = end_of_block(BLOCK, END)

    assert len(runs) == 1
    assert f"capacity-block-end: checkpoint hook already ran for this block's end: {BLOCK} {END}" in result.stdout


def test_a_warning_for_another_block_does_nothing(end_of_block):
    result, runs = end_of_block("cr-0fedcba9876543210", END)

    assert runs == []
    assert result.stdout == (
        f"capacity-block-end: warning for cr-0fedcba9876543210, but this node is in {BLOCK}: nothing to do\n"
    )


def test_without_a_hook_the_warning_is_logged(end_of_block):
    result, runs = end_of_block(BLOCK, END, GPUFLEET_CHECKPOINT_HOOK="")

    assert runs == []
    assert result.stdout.splitlines()[-1] == "capacity-block-end: no checkpoint hook configured (node.checkpoint_hook)"


def test_a_failing_hook_is_reported_not_fatal(end_of_block):
    result, _ = end_of_block(BLOCK, END, GPUFLEET_CHECKPOINT_HOOK="exit 3")

    assert result.stdout.splitlines()[-1] == "capacity-block-end: checkpoint hook failed with exit status 3"


@pytest.mark.parametrize(
    ("end", "when"),
    [
        ("2026-11-27T11:30:00Z", "2026-11-27 11:30:00 UTC"),
        ("2026-11-27T12:30:00+01:00", "2026-11-27 11:30:00 UTC"),
        ("2026-11-27T06:00:00-0530", "2026-11-27 11:30:00 UTC"),
        ("2026-11-27T11:30:00.000Z", "2026-11-27 11:30:00 UTC"),
        ("2026-11-27T11:30:00.123456+00:00", "2026-11-27 11:30:00 UTC"),
        ("2026-11-27T11:30Z", "2026-11-27 11:30:00 UTC"),
        ("1795779000", "2026-11-27 11:30:00 UTC"),
    ],
)
def test_the_end_date_is_read_in_each_form_and_the_hook_runs(end_of_block, end, when):
    result, runs = end_of_block(BLOCK, end)

    assert runs == [f"capacity-block-expiration {end}"]
    assert result.stdout.splitlines()[0] == (
        f"capacity-block-end: Capacity Block {BLOCK} ends {when}; EC2 terminates its instances from 30 minutes "
        "before that"
    )


@pytest.mark.parametrize(
    "end",
    [
        "",
        "soon",
        "[ODCR End Date]",
        "2026-11-27T11:30:00",  # no zone: local time of what?
        "2026-11-27 11:30:00Z",
        "2026-13-45T25:61:00Z",
        "17957790000000",  # milliseconds? too many digits for seconds
        "Fri, 27 Nov 2026 11:30:00 GMT",
        "null",
    ],
)
def test_an_end_date_it_cannot_read_is_logged_and_the_hook_runs_all_the_same(end_of_block, end):
    """The EC2 user guide's example of the event shows only a placeholder for end-date: whatever EC2 sends, the
    warning means the block ends within the hour, so the hook runs (issue 19 item 9)."""
    result, runs = end_of_block(BLOCK, end)

    assert runs == [f"capacity-block-expiration {end}"]
    assert result.stdout.splitlines()[0] == (
        f"capacity-block-end: could not read the end date '{end}' of Capacity Block {BLOCK} (expected an ISO 8601 "
        "time with a zone, or seconds since the epoch); the warning comes 40 minutes before the end, and EC2 "
        "terminates its instances from 30 minutes before it"
    )
    assert result.stdout.splitlines()[-1] == "capacity-block-end: checkpoint hook finished"
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "settings", "error"),
    [
        ((BLOCK,), {}, "usage: capacity-block-end.sh RESERVATION_ID END_DATE (from the block's expiration warning)"),
        (
            (BLOCK, END),
            {"GPUFLEET_CAPACITY_BLOCK": ""},
            "GPUFLEET_CAPACITY_BLOCK is not set (from /etc/gpufleet/node.env)",
        ),
    ],
)
def test_bad_input_is_one_clear_line(end_of_block, args, settings, error):
    result, runs = end_of_block(*args, check=False, **settings)

    assert result.stderr == f"capacity-block-end: error: {error}\n"
    assert runs == []


@pytest.mark.parametrize(
    ("reservation", "shown"),
    [
        ("cr-0123456789abcdef0123", "cr-0123456789abcdef0123"),
        ("CR-0123456789ABCDEF0", "CR-0123456789ABCDEF0"),
        ("cr-1; reboot", "cr-1\\;\\ reboot"),
    ],
)
def test_an_id_not_in_the_documented_form_is_logged_and_the_hook_runs_all_the_same(end_of_block, reservation, shown):
    """Issue 31: the script stopped before the hook on an id outside ^cr-[0-9a-f]{17}$, though the rule sends only
    this environment's block's warnings; the id is only compared and logged (quoted), never run."""
    result, runs = end_of_block(reservation, END)

    assert runs == [f"capacity-block-expiration {END}"]
    assert result.stdout.splitlines()[0] == (
        f"capacity-block-end: warning for {shown}, not in the form of a Capacity Reservation id (cr- and 17 hex "
        f"digits); the rule sends this environment's warnings only: taken as for {BLOCK}"
    )
    assert result.stdout.splitlines()[-1] == "capacity-block-end: checkpoint hook finished"


def test_the_run_command_from_the_rule_runs_the_hook_with_the_nodes_settings(node, tmp_path):
    """The user data of a Capacity Block environment installs the script and its settings (run on the fake node);
    then the rule's command, with EventBridge's placeholders filled from the event, runs it."""
    hook_log = tmp_path / "hook.log"
    document = {
        **yaml.safe_load(ENVIRONMENT),
        "instance_type": "p5.48xlarge",
        "capacity": {"target": 2, "on_demand": 2, "capacity_block": {"reservation_id": BLOCK, **BLOCK_DATES}},
        "node": {"checkpoint_hook": f'echo "$GPUFLEET_NOTICE" >> {hook_log}', "raid0_nvme": False, "max_clocks": False},
        "efa": False,
    }
    env = Environment.model_validate(document)
    user_data = tmp_path / "user-data.sh"
    user_data.write_text(render_user_data(env, load_catalog()[env.instance_type]))
    user_data.chmod(0o755)
    node.run(user_data)
    event = {"detail": {"capacity-reservation-id": BLOCK, "end-date": END}}
    template = json.dumps({"commands": [node_command()]})
    filled = template.replace("<reservation>", event["detail"]["capacity-reservation-id"]).replace(
        "<end>", event["detail"]["end-date"]
    )
    (command,) = json.loads(filled)["commands"]
    on_node = command.replace(SETTINGS_FILE, f"{node.root}{SETTINGS_FILE}").replace(
        f"{INSTALL_DIR}/", f"{node.root}{INSTALL_DIR}/"
    )

    result = subprocess.run(
        ["sh", "-c", on_node],
        env={"PATH": "/usr/bin:/bin", "GPUFLEET_ROOT": str(node.root)},
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stderr
    assert hook_log.read_text() == f"{END}\n"
