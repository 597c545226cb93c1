"""Stand-ins for the commands the node scripts run (lsblk, mdadm, nvidia-smi, curl, ...).

conftest.py puts a wrapper per command on PATH that runs `fake_commands.py NAME ARGS...`. Each call is appended
to $FAKE_LOG as a JSON list (command name, then arguments); what the commands report and change lives in the
JSON file $FAKE_STATE, which a test prepares and inspects."""

import json
import os
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_STATE"])


def load() -> dict:
    return json.loads(STATE.read_text())


def save(state: dict) -> None:
    STATE.write_text(json.dumps(state))


def lsblk(args: list[str], state: dict) -> int:
    for name, model in state["drives"]:
        print(f"{name} {model}")
    return 0


def mdadm(args: list[str], state: dict) -> int:
    mode, device, *rest = args
    members = [arg for arg in rest if arg.startswith("/dev/")]
    if mode == "--detail":
        return 0 if state.get("array_active") else 1
    if mode == "--examine":
        examined = [device, *members]
        return 0 if all(d in state.get("superblocks", []) for d in examined) else 1
    if mode == "--assemble":
        if not all(d in state.get("superblocks", []) for d in members):
            return 1
        state["array_active"] = True
    elif mode == "--create":
        state["array_active"] = True
        state["superblocks"] = members
        state.get("filesystems", {}).pop(device, None)
    save(state)
    return 0


def blkid(args: list[str], state: dict) -> int:
    filesystem = state.get("filesystems", {}).get(args[-1])
    if filesystem is None:
        return 2
    print(filesystem)
    return 0


def mkfs_xfs(args: list[str], state: dict) -> int:
    state.setdefault("filesystems", {})[args[-1]] = "xfs"
    save(state)
    return 0


def mountpoint(args: list[str], state: dict) -> int:
    return 0 if args[-1] in state.get("mounts", {}) else 1


def mount(args: list[str], state: dict) -> int:
    state.setdefault("mounts", {})[args[-1]] = args[-2]
    save(state)
    return 0


def nvidia_smi(args: list[str], state: dict) -> int:
    gpus = state["gpus"]
    if args[:1] == ["mig"]:
        index = int(args[args.index("-i") + 1])
        profiles = gpus[index]["profiles"]
        if "-lgip" in args:
            for name, (profile_id, free, total) in profiles.items():
                print(f"|   {index}  MIG {name:<13} {profile_id:>3}     {free}/{total}        4.75       No     14 |")
            return 0
        requested = args[args.index("-cgi") + 1].split(",")
        for entry in profiles.values():
            if str(entry[0]) == requested[0]:
                entry[1] -= len(requested)
        save(state)
        return 0
    query = next((arg for arg in args if arg.startswith("--query")), "")
    if query == "--query-gpu=index":
        print("\n".join(str(i) for i in range(len(gpus))))
    elif query == "--query-gpu=index,mig.mode.current,mig.mode.pending":
        print("\n".join(f"{i}, {gpu['mig_current']}, {gpu['mig_pending']}" for i, gpu in enumerate(gpus)))
    elif query == "--query-supported-clocks=memory,graphics":
        print(state["supported_clocks"] * len(gpus), end="")
    elif query == "--query-compute-apps=pid":
        print("".join(f"{pid}\n" for pid in state.get("gpu_processes", [])), end="")
    elif "-mig" in args:
        gpus[int(args[args.index("-i") + 1])]["mig_pending"] = "Enabled"
    elif "-r" in args:
        if state.get("reset_fails"):
            print("Unable to reset GPU: in use", file=sys.stderr)
            return 255
        gpu = gpus[int(args[args.index("-i") + 1])]
        gpu["mig_current"] = gpu["mig_pending"]
    save(state)
    return 0


# What IMDS answers for a metadata item that is not there, e.g. spot/instance-action before EC2 marks the instance
# for interruption (source: aws/amazon-ec2-metadata-mock pkg/server/httpserver.go notFoundResponse, abridged).
IMDS_NOT_FOUND = "<html><head><title>404 - Not Found</title></head><body><h1>404 - Not Found</h1></body></html>"


def curl(args: list[str], state: dict) -> int:
    """IMDSv2 as EC2 serves it (EC2 user guide, instancedata-data-retrieval "Responses and error messages" and
    instance-metadata-v2-how-it-works): PUT api/token with the TTL header gives a token (400 without a valid TTL,
    as aws/amazon-ec2-metadata-mock pkg/mock/imdsv2/tokengenerator.go answers);
    a GET needs a token it issued (401 otherwise); an item that is not there is a 404. Prints the body, then a
    line with the status, as `curl -w '\\n%{http_code}'` does."""
    url = args[-1]
    path = url.split("/latest/", 1)[1].removeprefix("meta-data/")
    if path == "api/token":
        if not any(arg.startswith("X-aws-ec2-metadata-token-ttl-seconds: ") for arg in args):
            print("curl: (22) The requested URL returned error: 400", file=sys.stderr)
            return 22
        state["tokens_issued"] = state.get("tokens_issued", 0) + 1
        save(state)
        print(f"token-{state['tokens_issued']}", end="")
        return 0
    issued = {f"X-aws-ec2-metadata-token: token-{n}" for n in range(1, state.get("tokens_issued", 0) + 1)}
    if not issued.intersection(args):
        print("\n401", end="")
        return 0
    # Each metadata path answers from its list of [status, body], one per call; the last answer repeats (a notice,
    # once there, stays). A path without a list is not there.
    answers = state["imds"].get(path, [[404, IMDS_NOT_FOUND]])
    status, body = answers.pop(0) if len(answers) > 1 else answers[0]
    save(state)
    print(f"{body}\n{status}", end="")
    return 0


def systemctl(args: list[str], state: dict) -> int:
    return 0


COMMANDS = {
    "lsblk": lsblk,
    "mdadm": mdadm,
    "blkid": blkid,
    "mkfs.xfs": mkfs_xfs,
    "mountpoint": mountpoint,
    "mount": mount,
    "nvidia-smi": nvidia_smi,
    "curl": curl,
    "systemctl": systemctl,
}

if __name__ == "__main__":
    name, *arguments = sys.argv[1:]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps([name, *arguments]) + "\n")
    sys.exit(COMMANDS[name](arguments, load()))
