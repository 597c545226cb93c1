"""What the journey tests share: starting a run with the installed console script and following it on the nodes."""

from __future__ import annotations

import re
import time

from tests.box.nodes import Node

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")


def started_run(done) -> str:
    """The run id `gpufleet run` printed; fails with its output when it did not start on every node."""
    assert done.returncode == 0, f"gpufleet run exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    found = RUN_ID.search(done.stdout)
    assert found, done.stdout
    return found.group(0)


def unit_state(node: Node, run_id: str) -> str:
    return node.run("systemctl", "show", "-P", "ActiveState", f"gpufleet-run-{run_id}.service").stdout.strip()


def wait_unit_over(node: Node, run_id: str, seconds: float = 180) -> str:
    """Wait until the run's unit on NODE is no longer active; its result (systemd's Result: success, exit-code...)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if unit_state(node, run_id) not in ("active", "activating", "deactivating"):
            return node.run("systemctl", "show", "-P", "Result", f"gpufleet-run-{run_id}.service").stdout.strip()
        time.sleep(0.5)
    raise AssertionError(f"gpufleet-run-{run_id} still running on {node.instance_id} after {seconds:.0f}s")


def journal(node: Node, run_id: str) -> list[str]:
    return node.run("journalctl", "-u", f"gpufleet-run-{run_id}", "-o", "cat", "--no-pager").stdout.splitlines()
