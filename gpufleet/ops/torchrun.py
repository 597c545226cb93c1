"""The torchrun command line of a run: c10d rendezvous on the head node, an elastic node range, restarts.

Every node of a run starts the same line but for `is_host`: torchrun's c10d rendezvous keeps its store (a TCPStore)
in the agent on the endpoint host, so that host is the head (gpufleet.ops.fleet.job_order puts a ready on-demand
node first: one spot cannot take); when the store's agent goes, every other agent loses the rendezvous. The store's
host is named explicitly rather than left to torch's guess, which compares the endpoint with this machine's host name
and addresses and "may return a false negative if this machine has CNAME records beyond its FQDN or IP addresses
assigned to secondary NICs" (torch/distributed/elastic/rendezvous/utils.py, _matches_machine_hostname, torch 1.13.1),
as EFA instances have.

Options are written with underscores (`--nproc_per_node`): torch 1.13's torchrun knows only those
(torch/distributed/run.py, get_args_parser, Debian's python3-torch 1.13.1), and torch 2.x accepts both spellings
(the same parser in pytorch/pytorch main: "--nproc-per-node", "--nproc_per_node", ...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The c10d backend's default port (parse_rendezvous_endpoint(params.endpoint, default_port=29400) in
# torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py, torch 1.13.1; DEFAULT_PORT = 29400 on main).
RENDEZVOUS_PORT = 29400
# Dynamic rendezvous's default wait, once the minimum number of nodes has joined, for more to come
# (RendezvousTimeout._DEFAULT_TIMEOUTS["last_call"] in torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
# torch 1.13.1; set through --rdzv_conf last_call_timeout=SECONDS, create_handler in the same file).
LAST_CALL_SECONDS = 30
# A rendezvous id ends up in store keys and log directory names (torch/distributed/run.py: --log_dir "a unique
# job-level sub-directory is created with rdzv_id as the prefix"): keep it to characters safe in both.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def rendezvous_options(*, nodes: str, processes_per_node: int, endpoint: str, rendezvous_id: str) -> list[str]:
    """torchrun's options for NODES (a count, or MIN:MAX) nodes of PROCESSES_PER_NODE processes meeting through c10d
    at ENDPOINT (HOST:PORT) under RENDEZVOUS_ID: the one place gpufleet spells them (a run's command line here,
    `gpufleet hosts --format torchrun`'s line for a job started by hand)."""
    return [
        f"--nnodes={nodes}",
        f"--nproc_per_node={processes_per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={rendezvous_id}",
    ]


def torchrun_command(
    *,
    run_id: str,
    head_address: str,
    is_head: bool,
    min_nodes: int,
    max_nodes: int,
    processes_per_node: int,
    max_restarts: int,
    command: Sequence[str],
    port: int = RENDEZVOUS_PORT,
    last_call_seconds: int = LAST_CALL_SECONDS,
    torchrun: str = "torchrun",
) -> list[str]:
    """The argument vector of one node's torchrun for a run.

    command is what follows torchrun's own options: a script and its arguments (torchrun runs it with its Python),
    `-m MODULE ARGS`, or `--no_python PROGRAM ARGS`. max_restarts counts failures of the worker group (a lost node
    is one on every surviving node); a node joining does not count ("membership changes do not count as retries",
    torch/distributed/elastic/agent/server/api.py, _invoke_run, torch 1.13.1).
    """
    problems = []
    if not _RUN_ID.fullmatch(run_id):
        problems.append(
            f"run id {run_id!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if not 1 <= min_nodes <= max_nodes:
        problems.append(f"node range {min_nodes}:{max_nodes}: need 1 <= minimum <= maximum")
    if processes_per_node < 1:
        problems.append(f"processes per node {processes_per_node}: need at least 1")
    if max_restarts < 0:
        problems.append(f"max restarts {max_restarts}: need 0 or more")
    if not 1 <= port <= 65535:
        problems.append(f"rendezvous port {port}: need 1-65535")
    if last_call_seconds < 1:
        problems.append(f"last call {last_call_seconds} s: need at least 1 second")
    if not command:
        problems.append("no command to run: give a training script and its arguments")
    if problems:
        raise ValueError("; ".join(problems))
    return [
        torchrun,
        *rendezvous_options(
            nodes=f"{min_nodes}:{max_nodes}",
            processes_per_node=processes_per_node,
            endpoint=f"{head_address}:{port}",
            rendezvous_id=run_id,
        ),
        f"--rdzv_conf=is_host={int(is_head)},last_call_timeout={last_call_seconds}",
        f"--max_restarts={max_restarts}",
        *command,
    ]
