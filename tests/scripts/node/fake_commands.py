"""Stand-ins for the commands the node scripts run (lsblk, mdadm, nvidia-smi, curl, ...).

conftest.py puts a wrapper per command on PATH that runs `fake_commands.py NAME ARGS...`. Each call is appended
to $FAKE_LOG as a JSON list (command name, then arguments); what the commands report and change lives in the
JSON file $FAKE_STATE, which a test prepares and inspects."""

import base64
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_STATE"])


def load() -> dict:
    return json.loads(STATE.read_text())


def save(state: dict) -> None:
    STATE.write_text(json.dumps(state))


# Block devices: a model of the kernel's drives and md arrays, kept in the state as
#   drives          [[name, model], ...] the drives probed so far (what lsblk lists)
#   late_drives     [[name, model], ...] drives still being probed: one more shows up after each lsblk call
#   superblocks     {"/dev/nvme1n1": {"uuid", "name" ("<homehost>:<name>"), "raid_devices"}} md metadata on drives
#   arrays          {"md127": {"uuid", "names" (/dev/md/ links), "members", "state"}} md devices the kernel has;
#                   state "inactive" (members bound, not started) or "clean" (running)
#   udev_queue      [{"add": drive}] device events udev has not handled yet: `udevadm settle` runs mdadm's
#                   incremental assembly for each (udev-md-raid-assembly.rules); an array it starts gets no
#                   /dev/md/ link here (which one udev makes depends on the mdadm version and the homehost)
#   filesystems     {key: type}, key "array:<uuid>" for an array's content, else the drive's path
#   mounts          {mount point: device as given to mount}
# Every block-device command renders the kernel's view into $GPUFLEET_ROOT/sys/class/block (the holders links
# and md/array_state the script reads) before and after it runs.
BLOCK_DEVICE_COMMANDS = {"lsblk", "udevadm", "mdadm", "blkid", "mkfs.xfs", "mountpoint", "mount"}


def render_sysfs(state: dict) -> None:
    block = Path(os.environ["GPUFLEET_ROOT"]) / "sys" / "class" / "block"
    shutil.rmtree(block, ignore_errors=True)
    for name, _model in state.get("drives", []):
        (block / name / "holders").mkdir(parents=True)
    for md, array in state.get("arrays", {}).items():
        (block / md / "md").mkdir(parents=True)
        (block / md / "md" / "array_state").write_text(array["state"] + "\n")
        for member in array["members"]:
            (block / member.removeprefix("/dev/") / "holders" / md).symlink_to(f"../../{md}")


def drive_exists(state: dict, device: str) -> bool:
    return any(f"/dev/{name}" == device for name, _model in state.get("drives", []))


def array_of(state: dict, device: str) -> str | None:
    """The md device (md127) a path names: /dev/md127 or one of its /dev/md/ links."""
    return next(
        (md for md, array in state.get("arrays", {}).items() if device == f"/dev/{md}" or device in array["names"]),
        None,
    )


def holder_of(state: dict, drive: str) -> str | None:
    return next((md for md, array in state.get("arrays", {}).items() if drive in array["members"]), None)


def content_key(state: dict, device: str) -> str | None:
    """What a device's data is: an array's (by its uuid, whatever name it is opened by) or a drive's own."""
    md = array_of(state, device)
    if md is not None:
        array = state["arrays"][md]
        return f"array:{array['uuid']}" if array["state"] != "inactive" else None
    return device if drive_exists(state, device) else None


def start_array(state: dict, names: list[str], members: list[str], uuid: str, running: bool) -> str:
    """A new md device, numbered from 127 down as mdadm does (mdopen.c, find_free_devnm)."""
    arrays = state.setdefault("arrays", {})
    md = next(f"md{number}" for number in range(127, 0, -1) if f"md{number}" not in arrays)
    arrays[md] = {"uuid": uuid, "names": names, "members": members, "state": "clean" if running else "inactive"}
    return md


def lsblk(args: list[str], state: dict) -> int:
    for name, model in state["drives"]:
        print(f"{name} {model}")
    if state.get("late_drives"):
        drive = state["late_drives"].pop(0)
        state["drives"].append(drive)
        # The kernel announces the new drive; udev assembles it into its array unless told otherwise.
        state.setdefault("udev_queue", []).append({"add": f"/dev/{drive[0]}"})
        save(state)
    return 0


def udevadm(args: list[str], state: dict) -> int:
    assert args == ["settle"], args
    for event in state.pop("udev_queue", []):
        superblock = state.get("superblocks", {}).get(event["add"])
        if superblock is None:
            continue
        md = next((md for md, array in state.get("arrays", {}).items() if array["uuid"] == superblock["uuid"]), None)
        if md is None:
            md = start_array(state, [], [], superblock["uuid"], running=False)
        array = state["arrays"][md]
        array["members"].append(event["add"])
        # Incremental assembly starts the array once every member is there (mdadm(8), INCREMENTAL MODE).
        if len(array["members"]) == superblock["raid_devices"]:
            array["state"] = "clean"
    save(state)
    return 0


def mdadm_examine(devices: list[str], state: dict) -> int:
    status = 0
    for device in devices:  # Examine.c: every device is reported; any without a superblock fails the run
        superblock = state.get("superblocks", {}).get(device)
        if not drive_exists(state, device):
            print(f"mdadm: cannot open {device}: No such file or directory", file=sys.stderr)
            status = 1
        elif superblock is None:
            print(f"mdadm: No md superblock detected on {device}.", file=sys.stderr)
            status = 1
        else:
            print(
                f"{device}:\n          Magic : a92b4efc\n     Array UUID : {superblock['uuid']}\n"
                f"           Name : {superblock['name']}\n   Raid Devices : {superblock['raid_devices']}"
            )
    return status


def mdadm_assemble(device: str, members: list[str], state: dict) -> int:
    usable = []
    for member in members:
        if holder_of(state, member):  # Assemble.c opens each member O_EXCL
            print(f"mdadm: {member} is busy - skipping", file=sys.stderr)
        elif member not in state.get("superblocks", {}):
            print(
                f"mdadm: no recogniseable superblock on {member}\nmdadm: {member} has no superblock - assembly aborted",
                file=sys.stderr,
            )
            return 1
        else:
            usable.append(member)
    if not usable:
        print(f"mdadm: no devices found for {device}", file=sys.stderr)
        return 1
    superblocks = [state["superblocks"][member] for member in usable]
    if len({superblock["uuid"] for superblock in superblocks}) > 1:
        print(f"mdadm: superblock on {usable[-1]} doesn't match others - assembly aborted", file=sys.stderr)
        return 1
    if len(usable) < superblocks[0]["raid_devices"]:
        print(f"mdadm: {device} assembled from {len(usable)} drives - not enough to start the array.", file=sys.stderr)
        return 1
    start_array(state, [device], usable, superblocks[0]["uuid"], running=True)
    print(f"mdadm: {device} has been started with {len(usable)} drives.", file=sys.stderr)
    save(state)
    return 0


def mdadm_create(device: str, options: list[str], members: list[str], state: dict) -> int:
    settings = dict(option.split("=", 1) for option in options if "=" in option)
    for member in members:
        if not drive_exists(state, member) or holder_of(state, member):  # Create.c opens each member O_EXCL
            reason = "Device or resource busy" if holder_of(state, member) else "No such file or directory"
            print(f"mdadm: cannot open {member}: {reason}", file=sys.stderr)
            return 2
    if "--run" not in options and any(member in state.get("superblocks", {}) for member in members):
        # mdadm asks "Continue creating array?"; a boot service's stdin is /dev/null, which answers no.
        print("mdadm: create aborted.", file=sys.stderr)
        return 2
    assert int(settings["--raid-devices"]) == len(members), "only whole-array creates are modelled"
    state["created_arrays"] = state.get("created_arrays", 0) + 1
    uuid = f"uuid-{state['created_arrays']}"
    name = f"{settings.get('--homehost', state.get('hostname', 'localhost'))}:{device.rsplit('/', 1)[-1]}"
    for member in members:
        state.setdefault("superblocks", {})[member] = {"uuid": uuid, "name": name, "raid_devices": len(members)}
    start_array(state, [device], members, uuid, running=True)
    print(f"mdadm: array {device} started.", file=sys.stderr)
    save(state)
    return 0


def mdadm_stop(device: str, state: dict) -> int:
    md = array_of(state, device)
    if md is None:
        print(f"mdadm: error opening {device}: No such file or directory", file=sys.stderr)
        return 1
    if any(array_of(state, mounted) == md for mounted in state.get("mounts", {}).values()):
        print(
            f"mdadm: Cannot get exclusive access to {device}:Perhaps a running process, mounted filesystem "
            "or active volume group?",
            file=sys.stderr,
        )
        return 1
    del state["arrays"][md]
    print(f"mdadm: stopped {device}", file=sys.stderr)
    save(state)
    return 0


def mdadm(args: list[str], state: dict) -> int:
    mode, *rest = args
    devices = [arg for arg in rest if arg.startswith("/dev/")]
    options = [arg for arg in rest if arg.startswith("-")]
    if mode == "--examine":
        return mdadm_examine(devices, state)
    if mode == "--assemble":
        return mdadm_assemble(devices[0], devices[1:], state)
    if mode == "--create":
        return mdadm_create(devices[0], options, devices[1:], state)
    if mode == "--stop":
        return mdadm_stop(devices[0], state)
    raise AssertionError(f"mdadm {args} is not modelled")


def blkid(args: list[str], state: dict) -> int:
    # blkid(8): exit 2 when the device has no identifiable content (or cannot be opened).
    filesystem = state.get("filesystems", {}).get(content_key(state, args[-1]) or "")
    if filesystem is None:
        return 2
    print(filesystem)
    return 0


def mkfs_xfs(args: list[str], state: dict) -> int:
    device = args[-1]
    key = content_key(state, device)
    if key is None or (drive_exists(state, device) and holder_of(state, device)):
        print(f"mkfs.xfs: cannot open {device}: Device or resource busy", file=sys.stderr)
        return 1
    existing = state.get("filesystems", {}).get(key)
    if existing and "-f" not in args:
        print(
            f"mkfs.xfs: {device} appears to contain an existing filesystem ({existing}).\n"
            "mkfs.xfs: Use the -f option to force overwrite.",
            file=sys.stderr,
        )
        return 1
    state.setdefault("filesystems", {})[key] = "xfs"
    save(state)
    return 0


def mountpoint(args: list[str], state: dict) -> int:
    return 0 if args[-1] in state.get("mounts", {}) else 1


# Lustre: the state's "lustre" holds
#   reachable        [source, ...] the mount sources (DNS_NAME@tcp:/MOUNT_NAME) whose file system answers: available,
#                    with the Lustre ports open between it and the node
#   failing_mounts   how many mounts fail first whatever the source (the network still coming up at boot)
# A mount that fails prints what mount.lustre prints (lustre/utils/mount_lustre.c: "mount.lustre: mount SOURCE at DIR
# failed: REASON", and for an unanswered MGS "Is the MGS running?"; the exit status, the errno, is unconfirmed).
MOUNT_LUSTRE_FAILED = 5


def mount_lustre(source: str, directory: str, state: dict) -> int:
    lustre = state.setdefault("lustre", {})
    if lustre.get("failing_mounts", 0) > 0 or source not in lustre.get("reachable", []):
        lustre["failing_mounts"] = max(0, lustre.get("failing_mounts", 0) - 1)
        save(state)
        print(f"mount.lustre: mount {source} at {directory} failed: Input/output error", file=sys.stderr)
        print("Is the MGS running?", file=sys.stderr)
        return MOUNT_LUSTRE_FAILED
    state.setdefault("mounts", {})[directory] = source
    save(state)
    return 0


def mount(args: list[str], state: dict) -> int:
    device, directory = args[-2:]
    if args[:2] == ["-t", "lustre"]:
        if not Path(directory).is_dir():
            print(f"mount.lustre: {directory}: No such file or directory", file=sys.stderr)
            return 2
        return mount_lustre(device, directory, state)
    key = content_key(state, device)
    if not Path(directory).is_dir():
        print(f"mount: {directory}: mount point does not exist.", file=sys.stderr)
        return 32
    if key is None or key not in state.get("filesystems", {}):
        print(
            f"mount: {directory}: wrong fs type, bad option, bad superblock on {device}, missing codepage or "
            "helper program, or other error.",
            file=sys.stderr,
        )
        return 32
    state.setdefault("mounts", {})[directory] = device
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
        reset_clocks(state)
    save(state)
    return 0


def reset_clocks(state: dict) -> None:
    """A GPU reset re-initialises the GPU, and clock settings made before it are gone (modelled for the whole node:
    the state keeps one clock setting; that locks do not survive a reset is unconfirmed against NVIDIA's manual,
    which documents no persistence for them)."""
    for setting in ("locked_graphics_clocks", "locked_memory_clocks", "applications_clocks"):
        state.pop(setting, None)


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
        if gpu.get("architecture", "ampere") != "hopper":
            reset_clocks(state)  # the driver reset the Ampere GPU to apply the mode
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
CLOCK_OPTIONS = {
    "-pm": "persistence_mode",
    "-lgc": "locked_graphics_clocks",
    "-lmc": "locked_memory_clocks",
    "-lmcd": "deferred_memory_clock",
    "-ac": "applications_clocks",
}


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
    line with the status, as `curl -w '\\n%{http_code}'` does; without -w the body alone, and with -f (--fail) an
    HTTP error is exit status 22 and a line on stderr instead (curl(1), --fail)."""
    url = args[-1]
    path = url.split("/latest/", 1)[1].removeprefix("meta-data/")
    fails = any(arg.startswith("-") and not arg.startswith("--") and "f" in arg for arg in args[:-1])
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
        status, body = 401, ""
    else:
        # Each metadata path answers from its list of [status, body], one per call; the last answer repeats (a
        # notice, once there, stays). A path without a list is not there.
        answers = state["imds"].get(path, [[404, IMDS_NOT_FOUND]])
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        save(state)
    if "-w" in args:
        print(f"{body}\n{status}", end="")
    elif fails and status >= 400:
        print(f"curl: (22) The requested URL returned error: {status}", file=sys.stderr)
        return 22
    else:
        print(body, end="")
    return 0


def systemctl(args: list[str], state: dict) -> int:
    # `systemctl is-active --quiet UNIT`: 0 for the units in state["active_units"], else 3 ("inactive", systemctl(1)
    # "is-active": non-zero when one is not active; 3 is what it returns for an inactive unit, (unconfirmed)).
    if args[:2] == ["is-active", "--quiet"]:
        return 0 if args[2] in state.get("active_units", []) else 3
    return 0


def systemd_run(args: list[str], state: dict) -> int:
    """Starts nothing: the call itself (in the log) is what the tests read."""
    return 0


def mount_lustre_helper(args: list[str], state: dict) -> int:
    """mount.lustre itself: its presence is what says the Lustre client is installed; the fake mount does the work."""
    return 0


def aws(args: list[str], state: dict) -> int:
    """The AWS CLI: the call is logged; it succeeds unless the state says aws_exit. `secretsmanager get-secret-value
    --secret-id ID --query SecretString --output text` prints the state's secrets[ID] as the CLI's text output does
    (the string and a newline); a secret the state lacks is the service's ResourceNotFoundException. A successful
    `ec2 create-tags --resources ID --tags JSON` sets the tags in the state's instance_tags ({id: {key: value}}).
    `s3 cp s3://BUCKET/KEY FILE` copies the local file the state's s3_objects names for that URL; an object the state
    lacks is S3's 404, as the CLI reports it (exit status 1)."""
    if args[:2] == ["s3", "cp"]:
        source, destination = args[-2:]
        if source not in state.get("s3_objects", {}):
            key = source.split("/", 3)[3]
            print(
                "fatal error: An error occurred (404) when calling the HeadObject operation: "
                f'Key "{key}" does not exist',
                file=sys.stderr,
            )
            return 1
        shutil.copyfile(state["s3_objects"][source], destination)
        return state.get("aws_exit", 0)
    if args[:2] == ["secretsmanager", "get-secret-value"]:
        secret_id = args[args.index("--secret-id") + 1]
        assert args[args.index("--query") + 1] == "SecretString" and args[args.index("--output") + 1] == "text"
        if secret_id not in state.get("secrets", {}):
            print(
                "An error occurred (ResourceNotFoundException) when calling the GetSecretValue operation: "
                "Secrets Manager can't find the specified secret.",
                file=sys.stderr,
            )
            return 254
        print(state["secrets"][secret_id])
    status = state.get("aws_exit", 0)
    if status == 0 and args[:2] == ["ec2", "create-tags"]:
        instance = args[args.index("--resources") + 1]
        tags = json.loads(args[args.index("--tags") + 1])
        state.setdefault("instance_tags", {}).setdefault(instance, {}).update({t["Key"]: t["Value"] for t in tags})
        save(state)
    return status


def node_health_check(args: list[str], state: dict) -> int:
    """scripts/ops/node-health-check.sh as installed on the node: prints the state's health_output (its PASS/FAIL
    lines) and exits with health_exit (0, a healthy node, by default)."""
    print(state.get("health_output", "PASS gpu-count: 8 GPUs visible (expected 8)\nnode healthy"))
    return state.get("health_exit", 0)


# Accounts: the user and group databases are the files $GPUFLEET_ROOT/etc/passwd and etc/group, in their usual format
# (passwd(5), group(5)); getent, groupadd and useradd read and write them as the real ones do /etc's.


def database(name: str) -> Path:
    return Path(os.environ["GPUFLEET_ROOT"]) / "etc" / name


def entries(name: str) -> list[list[str]]:
    path = database(name)
    return [line.split(":") for line in path.read_text().splitlines()] if path.exists() else []


def add_entry(name: str, fields: list[str]) -> None:
    path = database(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(":".join(fields) + "\n")


def getent(args: list[str], state: dict) -> int:
    """getent DATABASE KEY: the entry whose name or id (third field) is KEY; exit 2 when there is none ("One or more
    supplied key could not be found in the database", getent(1)). getent ahostsv4 NAME resolves through state["hosts"]
    ({name: IPv4 address}); an address resolves to itself. It prints a line per socket type, as glibc's getent does
    (address, type, then the canonical name on the first line only)."""
    name, key = args
    if name == "ahostsv4":
        address = state.get("hosts", {}).get(key, key if key.replace(".", "").isdigit() else None)
        if address is None:
            return 2
        print(f"{address:<15} STREAM {key}\n{address:<15} DGRAM  \n{address:<15} RAW    ")
        return 0
    found = [entry for entry in entries(name) if key in (entry[0], entry[2])]
    if not found:
        return 2
    print(":".join(found[0]))
    return 0


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def groupadd(args: list[str], state: dict) -> int:
    """groupadd --gid GID NAME; exit 9 for a name in use, 4 for a gid in use (groupadd(8), EXIT VALUES)."""
    gid, group = option(args, "--gid"), args[-1]
    if any(entry[0] == group for entry in entries("group")):
        print(f"groupadd: group '{group}' already exists", file=sys.stderr)
        return 9
    if any(entry[2] == gid for entry in entries("group")):
        print(f"groupadd: GID '{gid}' already exists", file=sys.stderr)
        return 4
    add_entry("group", [group, "x", gid, ""])
    return 0


def useradd(args: list[str], state: dict) -> int:
    """useradd --uid UID --gid GID --create-home --home-dir HOME --shell SHELL --password PASSWORD NAME; exit 9 for a
    name in use, 4 for a uid in use, 6 for a group that does not exist (useradd(8), EXIT VALUES). The password goes to
    state["passwords"], as /etc/shadow would keep it."""
    uid, gid, home, user = option(args, "--uid"), option(args, "--gid"), option(args, "--home-dir"), args[-1]
    if any(entry[0] == user for entry in entries("passwd")):
        print(f"useradd: user '{user}' already exists", file=sys.stderr)
        return 9
    if any(entry[2] == uid for entry in entries("passwd")):
        print(f"useradd: UID {uid} is not unique", file=sys.stderr)
        return 4
    if not any(entry[2] == gid for entry in entries("group")):
        print(f"useradd: group '{gid}' does not exist", file=sys.stderr)
        return 6
    add_entry("passwd", [user, "x", uid, gid, "", home, option(args, "--shell")])
    state.setdefault("passwords", {})[user] = option(args, "--password")
    save(state)
    if "--create-home" in args:
        (Path(os.environ["GPUFLEET_ROOT"]) / home.lstrip("/")).mkdir(parents=True)
    return 0


def chown(args: list[str], state: dict) -> int:
    """chown [-R] OWNER PATH: the call is logged (the tests do not run as root); fails like chown for a missing
    path."""
    if not Path(args[-1]).exists():
        print(f"chown: cannot access '{args[-1]}': No such file or directory", file=sys.stderr)
        return 1
    return 0


def ssh_keygen(args: list[str], state: dict) -> int:
    """ssh-keygen -A (host keys: logged only) and ssh-keygen -y -f KEY, which prints the public key of an unencrypted
    OpenSSH private key: the first public key blob of the openssh-key-v1 structure (openssh-portable PROTOCOL.key:
    the magic "openssh-key-v1\\0", then the strings ciphername, kdfname and kdfoptions, the key count, the public
    keys), as "TYPE BASE64". Anything else fails as ssh-keygen does for a file it cannot load."""
    if args == ["-A"]:
        return 0
    assert args[:2] == ["-y", "-f"], args
    path = args[2]
    lines = Path(path).read_text().strip().splitlines()
    try:
        assert lines[0] == "-----BEGIN OPENSSH PRIVATE KEY-----" and lines[-1] == "-----END OPENSSH PRIVATE KEY-----"
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
        magic = b"openssh-key-v1\0"
        assert blob.startswith(magic)
        offset = len(magic)
        for _ in ("ciphername", "kdfname", "kdfoptions"):
            (length,) = struct.unpack(">I", blob[offset : offset + 4])
            offset += 4 + length
        offset += 4  # the number of keys
        (length,) = struct.unpack(">I", blob[offset : offset + 4])
        public = blob[offset + 4 : offset + 4 + length]
        (type_length,) = struct.unpack(">I", public[:4])
        key_type = public[4 : 4 + type_length].decode()
    except (AssertionError, IndexError, ValueError, struct.error):
        print(f'Load key "{path}": invalid format', file=sys.stderr)
        return 255
    print(f"{key_type} {base64.b64encode(public).decode()}")
    return 0


def runuser(args: list[str], state: dict) -> int:
    """runuser -u USER -- COMMAND...: runs COMMAND, as the test's own user: a fake node has no accounts of the kernel's
    (its users are lines in $GPUFLEET_ROOT/etc/passwd). What runuser keeps from root is proven on real nodes, in the
    box (tests/box)."""
    assert args[0] == "-u" and args[2] == "--", args
    state.setdefault("runuser", []).append(args[1])
    save(state)
    return subprocess.run(args[3:], check=False).returncode


def sshd(args: list[str], state: dict) -> int:
    """sshd -t -f FILE: the configuration check. The state's sshd_refuses names a line that makes it fail (with sshd's
    own form of message); the real sshd reads the real block on the box's nodes (tests/box)."""
    assert args[:2] == ["-t", "-f"], args
    refused = state.get("sshd_refuses")
    if refused and refused in Path(args[2]).read_text():
        print(f"{args[2]} line 1: Bad configuration option: {refused}", file=sys.stderr)
        return 255
    return 0


COMMANDS = {
    "lsblk": lsblk,
    "udevadm": udevadm,
    "mdadm": mdadm,
    "blkid": blkid,
    "mkfs.xfs": mkfs_xfs,
    "mountpoint": mountpoint,
    "mount": mount,
    "nvidia-smi": nvidia_smi,
    "curl": curl,
    "systemctl": systemctl,
    "systemd-run": systemd_run,
    "aws": aws,
    "mount.lustre": mount_lustre_helper,
    "getent": getent,
    "groupadd": groupadd,
    "useradd": useradd,
    "chown": chown,
    "ssh-keygen": ssh_keygen,
    "node-health-check": node_health_check,
    "runuser": runuser,
    "sshd": sshd,
}

# Commands that run other commands, which may be fakes themselves: they hold no lock while theirs run.
SPAWNING = {"runuser"}

if __name__ == "__main__":
    name, *arguments = sys.argv[1:]
    # One fake at a time reads and writes the state (run-setup.sh marks a step while the step runs): a read-modify-write
    # of the one state file must not interleave with another's.
    with open(f"{STATE}.lock", "a") as lock:
        if name not in SPAWNING:
            fcntl.flock(lock, fcntl.LOCK_EX)
        with open(os.environ["FAKE_LOG"], "a") as log:
            log.write(json.dumps([name, *arguments]) + "\n")
        if name in BLOCK_DEVICE_COMMANDS:
            render_sysfs(load())
        status = COMMANDS[name](arguments, load())
        if name in BLOCK_DEVICE_COMMANDS:
            render_sysfs(load())
    sys.exit(status)
