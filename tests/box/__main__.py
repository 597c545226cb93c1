"""The cluster in a box by hand (docs/development/cluster-in-a-box.md): `make box` runs
`python -m tests.box up`, which brings an environment's cluster up on real systemd nodes, prints how to reach them,
and keeps them until Ctrl-C or `make box-down` (SIGTERM), then takes everything down.

  python -m tests.box up [--dir DIR] [--environment FILE] [--nodes N] [--spot N]
  python -m tests.box shell [--dir DIR] [NODE]       a root shell on a node (NODE: its index or instance id)
  python -m tests.box down [--dir DIR]                ask the `up` of DIR to take its box down
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from tests.box.cluster import BoxCluster

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_DIR = Path("/tmp/gpufleet-box")


def node_pids(directory: Path) -> list[tuple[str, int]]:
    """(instance id, PID 1 on the host) of the running nodes of the box in DIRECTORY, in boot order."""
    nodes = directory / "box" / "nodes"
    found = [(path.parent.name, int(path.read_text())) for path in nodes.glob("*/pid")] if nodes.exists() else []
    return sorted(found, key=lambda item: (nodes / item[0] / "pid").stat().st_mtime)


def up(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    pid_file = args.dir / "up.pid"
    if pid_file.exists() and Path(f"/proc/{pid_file.read_text().strip()}").exists():
        print(f"box: a box is up in {args.dir} already (make box-down takes it down)", file=sys.stderr)
        return 1
    # What an earlier box left there (its synthesis, logs, node layers) goes; a mount left by a box that was killed
    # makes this fail rather than be deleted through.
    if args.dir.exists():
        shutil.rmtree(args.dir)
    args.dir.mkdir(parents=True)
    cluster = BoxCluster(args.dir, args.environment, capacity=(args.nodes, args.nodes - args.spot))
    (args.dir / "up.pid").write_text(f"{os.getpid()}\n")
    try:
        cluster.start(progress=lambda *words: print(*words, flush=True))
        nodes = []
        for index in range(args.nodes):
            market = "spot" if index >= args.nodes - args.spot else "on-demand"
            print(f"box: booting node {index} ({market})", flush=True)
            nodes.append(cluster.launch(market))
            if stop.is_set():
                return 130
        for index, node in enumerate(nodes):
            print(
                f"box: node {index} {node.instance_id} {node.spec.address}: {cluster.wait_ready(node, 300)}", flush=True
            )
        assert cluster.aws is not None
        print(
            f"\nbox: up in {args.dir}. A root shell on node 0: make box-shell NODE=0 (or python -m tests.box shell 0)"
        )
        exports = {**cluster.aws.environment(), "GPUFLEET_ENVIRONMENTS_DIR": str(cluster.environments_dir)}
        (args.dir / "operator.env").write_text("".join(f"export {name}={value}\n" for name, value in exports.items()))
        print(
            f"box: the operator's view: . {args.dir / 'operator.env'} && gpufleet status {cluster.env.name} "
            f"--fleet-id {cluster.fleet_id}"
        )
        print("box: Ctrl-C or make box-down takes it down", flush=True)
        stop.wait()
        return 0
    finally:
        print("box: taking everything down", flush=True)
        cluster.close()
        (args.dir / "up.pid").unlink(missing_ok=True)
        leftovers = cluster.box.leftovers() if cluster.box else []
        print("box: down" + (f"; left behind: {', '.join(leftovers)}" if leftovers else ""), flush=True)


def shell(args: argparse.Namespace) -> int:
    nodes = node_pids(args.dir)
    if not nodes:
        print(f"box: no node is running in {args.dir} (make box brings them up)", file=sys.stderr)
        return 1
    chosen = [pid for index, (instance, pid) in enumerate(nodes) if args.node in (str(index), instance)]
    if not chosen:
        known = ", ".join(f"{index} ({instance})" for index, (instance, _) in enumerate(nodes))
        print(f"box: no node {args.node} in {args.dir}; running: {known}", file=sys.stderr)
        return 1
    os.execvp(
        "nsenter",
        [
            "nsenter",
            "-t",
            str(chosen[0]),
            "-a",
            "--",
            "env",
            "-i",
            "TERM=" + os.environ.get("TERM", "xterm"),
            "bash",
            "-l",
        ],
    )


def down(args: argparse.Namespace) -> int:
    pid_file = args.dir / "up.pid"
    if not pid_file.exists():
        print(f"box: no box is up in {args.dir}", file=sys.stderr)
        return 1
    os.kill(int(pid_file.read_text()), signal.SIGTERM)
    print(f"box: asked the box in {args.dir} to go down (its `up` prints when it is down)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.box", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "shell", "down"):
        command = commands.add_parser(name)
        command.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help=f"the box's directory (default {DEFAULT_DIR})"
        )
        if name == "up":
            command.add_argument("--environment", type=Path, default=REPOSITORY / "environments" / "prod.yaml")
            command.add_argument("--nodes", type=int, default=2, help="nodes to boot (default 2)")
            command.add_argument("--spot", type=int, default=1, help="of which spot (default 1)")
        if name == "shell":
            command.add_argument("node", nargs="?", default="0", help="index or instance id (default 0)")
    args = parser.parse_args(argv)
    return {"up": up, "shell": shell, "down": down}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
