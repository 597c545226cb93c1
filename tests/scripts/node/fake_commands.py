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
        return enable_mig(int(args[args.index("-i") + 1]), state)
    elif args[:1] and args[0] in CLOCK_OPTIONS:
        return set_clocks(args, state)
    elif "-r" in args:
        if state.get("reset_fails"):
            print("Unable to reset GPU: in use", file=sys.stderr)
            return 255
        gpu = gpus[int(args[args.index("-i") + 1])]
        gpu["mig_current"] = gpu["mig_pending"]
    save(state)
    return 0


def bus_id(index: int) -> str:
    return f"00000000:{0x10 + index:02X}:1C.0"


def enable_mig(index: int, state: dict) -> int:
    """nvidia-smi -i INDEX -mig 1, per the MIG user guide ("Enable MIG Mode"). A GPU's "architecture" is "ampere"
    (the default) or "hopper". Hopper: the mode takes effect at once, no reset. Ampere: the driver attempts a reset
    itself ("driver_resets_gpu" in the state: it succeeds); when it cannot, the mode stays pending until -r or a
    reboot, and nvidia-smi says so in a warning but exits 0, as in the guide's examples."""
    gpu = state["gpus"][index]
    gpu["mig_pending"] = "Enabled"
    in_use = bool(state.get("gpu_processes"))
    if gpu.get("architecture", "ampere") == "hopper" or (state.get("driver_resets_gpu") and not in_use):
        gpu["mig_current"] = "Enabled"
        print(f"Enabled MIG Mode for GPU {bus_id(index)}")
    elif in_use:
        print(f"Warning: MIG mode is in pending enable state for GPU {bus_id(index)}:In use by another client")
    else:
        print(f"Warning: MIG mode is in pending enable state for GPU {bus_id(index)}:Not Supported")
        print(f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU {bus_id(index)}")
    print("All done.")
    save(state)
    return 0


# Clock options of nvidia-smi (its manual, https://docs.nvidia.com/deploy/nvidia-smi/index.html). "driver_options"
# in the state lists those the installed driver has (default: all); the state records what each one set.
CLOCK_OPTIONS = {"-pm": "persistence_mode", "-lgc": "locked_graphics_clocks", "-lmc": "locked_memory_clocks",
                 "-lmcd": "deferred_memory_clock", "-ac": "applications_clocks"}


def set_clocks(args: list[str], state: dict) -> int:
    option, value = args[0], args[1]
    if option not in state.get("driver_options", CLOCK_OPTIONS):
        # An option this driver does not have: exit code 2, "A supplied argument or flag is invalid" (RETURN VALUE in
        # the manual); the text is what nvidia-smi prints for an unknown option (stream unconfirmed).
        print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", file=sys.stderr)
        return 2
    if option == "-lmc" and any(gpu.get("architecture") == "hopper" for gpu in state["gpus"]):
        # The manual: -lmc "does not work on GPUs based on NVIDIA Hopper architectures". nvidia-smi reports an
        # unsupported setting per GPU, "Treating as warning and moving on.", and exits 0.
        for index in range(len(state["gpus"])):
            print(f"Setting locked Memory clocks is not supported for GPU {bus_id(index)}.")
            print("Treating as warning and moving on.")
        print("All done.")
        return 0
    state[CLOCK_OPTIONS[option]] = value
    save(state)
    print("All done.")
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
