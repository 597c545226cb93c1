"""The box's AWS: moto's server (all services, one set of backends) on two listeners, and Run Command delivered to the
box's nodes the way the SSM agent runs AWS-RunShellScript. Started by tests/box/aws.py as a process of its own:

    python -m tests.box.aws_server --box-dir DIR --switch-netns FILE --endpoint-address A.B.C.D \\
        --names-file F --ready-file R --region us-east-1 [--region ...]

- A CA and a server certificate for the endpoint names (each line of F, plus *.REGION.amazonaws.com and
  *.s3.REGION.amazonaws.com for every region, *.amazonaws.com and *.s3.amazonaws.com for the global names); the CA's
  PEM goes to DIR/aws/ca.pem, for the nodes' trust store.
- Plain HTTP on 127.0.0.1 (an ephemeral port, in this process's network namespace) for the operator's boto3, and HTTPS
  on ENDPOINT:443 inside the box's switch namespace, where the nodes' real AWS CLI reaches it by name through the box's
  DNS. moto's DomainDispatcherApplication picks the service from the SigV4 credential scope (moto 5.2.5,
  moto_server/werkzeug_app.py, get_application: the Host header is not read there), so both listeners route the same;
  S3 then reads the bucket from a virtual-hosted Host (moto/s3/responses.py, subdomain_based_buckets).
- {"url": "http://127.0.0.1:PORT"} goes to R once both listen.
- The Spot Fleet answers of tests/box/fleet_emulation.py are installed too (the box is the fleet), and the Price List
  API's GetProducts of tests/box/price_list.py, FSx's data repository associations and tasks of
  tests/box/fsx_emulation.py and CloudFormation's termination protection of tests/box/cloudformation_emulation.py,
  which moto lacks.

Run Command (the one part that is our own code; moto 5.2.5's SendCommand records a command that reports Success at
once and runs nothing, and it has no ListCommandInvocations). Facts from the agent's source, aws/amazon-ssm-agent at
1c217c89b42de51d4f4063363d8ec1f2eef56055 (paths under agent/):
- The command goes to /var/lib/amazon/ssm/<instance-id>/document/orchestration/<CommandId>/awsrunShellScript/
  0.awsrunShellScript/_script.sh (appconfig/constants_unix.go:32 AgentData, constants.go:134,140;
  messageservice/interactor/mdsinteractor/mdsinteractor.go:130; fileutil/fileutil.go:123-129 drops the colons of
  "aws:runShellScript" and its step id "0.aws:runShellScript"), directories made with mode 0700
  (fileutil.go:159-165), the script written with mode 0700 and content "\\n".join(commands) + "\\n", nothing prepended
  (plugins/pluginutil/pluginutil.go:82-92; appconfig/constants.go:159). Its stdout and stderr are appended to files
  `stdout` and `stderr` (mode 0600) in that directory (framework/processor/executer/iohandler/iohandler.go:53-64,
  iomodule/fileS3.go:63-78).
- It runs as `sh -c <script path>` (plugins/runscript/runshellscript.go:32-34, runscript.go:191-195) as root, in a
  process group of its own (executers/executers_unix.go:29-33, Setpgid), stdin not set (/dev/null: Go's os/exec),
  stdout and stderr pipes the agent copies. Its working directory: Run Command passes no default working directory
  (messageservice/utils/messageutil.go:219-226), so with no workingDirectory parameter cmd.Dir is "" (runscript.go:
  156-165, executers.go:272) and the process keeps the agent's, which the agent's unit sets: WorkingDirectory=/usr/bin/
  (packaging/linux/amazon-ssm-agent.service). Its environment: the agent's own (os.Environ()) plus SSM_COMMAND_ID
  (runscript.go:115-122), AWS_SSM_INSTANCE_ID, AWS_SSM_REGION_NAME, AWS_SSM_PLATFORM_NAME and AWS_SSM_PLATFORM_VERSION
  (executers.go:38-43, 465-488), the platform being /etc/os-release's NAME and VERSION_ID
  (platform/platform_unix.go:123-135).
- executionTimeout: default 3600, at least 5, at most 172800, a value out of range or unreadable taken as 3600
  (pluginutil.go:36-40, 138-194). When it is reached the whole process group gets SIGKILL (executers_unix.go:42-53)
  and the exit code is 137 (executers.go:324-336; appconfig/constants_unix.go:97), whose status is TimedOut
  (pluginutil/pluginutil_unix.go:34-47), a script's own exit 137 included. A process started with systemd-run is
  systemd's, outside the group, and survives.
- The agent waits for the exit and for both pipes to close (executers.go:275 and Go's exec.Cmd.Wait with writers that
  are not files), so a background process that keeps stdout open keeps the command running until it ends or the
  timeout kills the group.
- Exit 0: Success. Any other: Failed, with "failed to run commands: exit status N" (Go's ExitError text; "signal:
  NAME" for a signal, code -1) appended to stderr (runscript.go:198-208; iohandler.go:344-354), with no newline before
  it: AppendError adds one only when the console copy of stderr is non-empty (iohandler.go:411-426), and that copy is
  set only when the stream closes after the plugin returns (iomodule/commandoutput.go:43-88; runpluginutil.go:407).
- What goes back: StandardOutput and StandardError each cut by StringPrefix(s, 24000, "--output truncated--")
  (framework/runpluginutil/runpluginutil.go:264-268: MaxStdoutLength for both; pluginutil.go:43-57 cuts a string of
  24000 bytes or more), Output = TruncateOutput(stdout, stderr, 2500) (iohandler.go:31-40, 240-248, 436-472).
What the service does with them, from the botocore 1.44.5 ssm model and the Systems Manager user guide
("Understanding command statuses", monitor-commands.html): StandardOutputContent is empty until the invocation is over;
StandardErrorContent is at most 8000 characters (how the service cuts it is unconfirmed: here StringPrefix(s, 8000,
the same suffix)); ResponseCode -1 until the command ran; an invocation goes Pending -> InProgress -> a final status;
SendCommand refuses the whole call with InvalidInstanceId when an id is not a node SSM manages (here: no
DIR/nodes/<id>/pid, or its PID 1 gone, or a node of another region; the message's wording is unconfirmed). A node
whose PID 1 is gone when delivery is tried ends Undeliverable ("The managed node might not exist or might not be
responding"); one whose agent is not running stays Pending until the delivery timeout, TimeoutSeconds plus
executionTimeout (the guide's Pending row), then ends DeliveryTimedOut. The Status that goes with each StatusDetails
(Failed for Undeliverable, TimedOut for DeliveryTimedOut and ExecutionTimedOut), the timestamp formats and a command's
aggregate status (MaxErrors not applied) are unconfirmed. Not modeled: the workingDirectory parameter (refused), exit
codes 168, 169 and 194, CancelCommand, output to S3 or CloudWatch Logs, documents other than AWS-RunShellScript
(refused).

A node is found through what the box writes: DIR/nodes/<id>/pid (its PID 1 on the host), DIR/nodes/<id>/cgroup (its
cgroup directory on the host) and DIR/nodes/<id>/imds.json (its region). The agent is the node's
amazon-ssm-agent.service (a stand-in that only stays; its unit is in tests/box/image/layer/etc/systemd/system/): a
command is started in that unit's cgroup before it runs (so systemd counts it the agent's, as KillMode=process
expects), in every namespace of the node's PID 1 (LAUNCHER below), with the agent's working directory and
environment, and its files are written inside the node's root with every path resolved in that root (openat2
RESOLVE_IN_ROOT), as the agent running there would resolve them. What differs from the agent's child: the `sh -c`
has no parent and no session inside the node (its parent is the launcher on the host: PPID 0 and SID 0 there), where
the agent's child has the agent as parent and shares its session.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import ipaddress
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000  # sched.h
SYS_OPENAT2 = 437  # x86_64 and aarch64
RESOLVE_NO_MAGICLINKS = 0x02  # linux/openat2.h
RESOLVE_IN_ROOT = 0x10
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTANCE_ID = re.compile(r"(^i-(\w{8}|\w{17})$)|(^mi-\w{17}$)")  # botocore ssm model, InstanceId

AGENT_UNIT = "amazon-ssm-agent.service"
AGENT_DATA = "/var/lib/amazon/ssm"
RUN_SHELL_SCRIPT = "AWS-RunShellScript"
PLUGIN_NAME = "aws:runShellScript"
PLUGIN_DIRECTORY = "awsrunShellScript/0.awsrunShellScript"
SCRIPT_NAME = "_script.sh"
DIRECTORY_MODE = 0o700  # appconfig.ReadWriteExecuteAccess
SCRIPT_MODE = 0o700
OUTPUT_MODE = 0o600  # appconfig.ReadWriteAccess
DEFAULT_EXECUTION_TIMEOUT = 3600
MIN_EXECUTION_TIMEOUT = 5
MAX_EXECUTION_TIMEOUT = 172800
STOPPED_PREEMPTIVELY = 137  # appconfig.CommandStoppedPreemptivelyExitCode
MAX_OUTPUT = 24000  # iohandler.DefaultOutputConfig MaxStdoutLength, used for stdout and stderr
MAX_ERROR_CONTENT = 8000  # botocore ssm model, StandardErrorContent max
TRUNCATED_SUFFIX = b"--output truncated--"
PLUGIN_OUTPUT_MAX = 2500  # iohandler.MaximumPluginOutputSize
ERROR_TITLE = b"\n----------ERROR-------\n"
OUTPUT_TRUNCATED = b"\n---Output truncated---"
ERROR_TRUNCATED = b"\n---Error truncated----"
FINAL = ("Success", "Cancelled", "TimedOut", "Failed")
# Go's names of the signals a command can die of (syscall.Signal.String on Linux), for "signal: NAME".
SIGNAL_NAMES = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
}


# How a command starts on a node, run as a process of its own on the host (`python -I -S -c LAUNCHER PID1 WORKDIR
# CGROUP_PROCS SPEC REPORT_FD`; the server's threads rule out a preexec_fn). It opens the agent's cgroup.procs and
# working directory from the host, enters the namespaces of the node's PID 1 that differ from its own (nsenter --all's
# order; the cgroup namespace last, in the child), and forks. The child, the command's first process in the node's
# PID namespace, moves itself into the agent's cgroup, makes itself the leader of a process group of its own (the
# agent's Setpgid), moves into that directory and executes SPEC's argv with exactly SPEC's environment. Its PID on the
# host goes to REPORT_FD; the launcher exits as the child did (re-raising its signal).
LAUNCHER = r"""
import ctypes, json, os, resource, signal, sys, warnings  # os.execvpe imports warnings: import it before setns
pid1, workdir, procs, spec, report = sys.argv[1:6]
spec, report = json.loads(spec), int(report)
cgroup = os.open(procs, os.O_WRONLY)
directory = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
libc = ctypes.CDLL(None, use_errno=True)
def enter(name, fd):
    if libc.setns(fd, 0) != 0:
        raise OSError(ctypes.get_errno(), f"setns {name}: {os.strerror(ctypes.get_errno())}")
entered = []
for name in ("user", "cgroup", "ipc", "uts", "net", "pid", "mnt", "time"):
    path = f"/proc/{pid1}/ns/{name}"
    if os.path.exists(path) and os.stat(path).st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
        entered.append((name, os.open(path, os.O_RDONLY)))
for name, fd in entered:
    if name != "cgroup":
        enter(name, fd)
child = os.fork()
if child == 0:
    try:
        os.close(report)
        os.write(cgroup, b"0")
        for name, fd in entered:
            if name == "cgroup":
                enter(name, fd)
        os.setpgid(0, 0)
        os.fchdir(directory)
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as error:
        os.write(2, f"launcher: {error}\n".encode())
        os._exit(127)
os.write(report, str(child).encode())
os.close(report)
_, status = os.waitpid(child, 0)
if os.WIFSIGNALED(status):
    number = os.WTERMSIG(status)
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.kill(os.getpid(), number)
sys.exit(os.waitstatus_to_exitcode(status))
"""

# ---------------------------------------------------------------------------------------------------------------------
# What the agent computes


def string_prefix(data: bytes, limit: int, suffix: bytes = TRUNCATED_SUFFIX) -> bytes:
    """pluginutil.StringPrefix: DATA when shorter than LIMIT, else its first LIMIT-len(SUFFIX) bytes and SUFFIX."""
    if len(data) < limit:
        return data
    if limit > len(suffix):
        return data[: limit - len(suffix)] + suffix
    return suffix[:limit]


def truncate_output(stdout: bytes, stderr: bytes, capacity: int = PLUGIN_OUTPUT_MAX) -> bytes:
    """iohandler.TruncateOutput, line for line (Go's integer division is Python's // for these non-negative sizes)."""
    output_size, error_size = len(stdout), len(stderr)
    title = ERROR_TITLE if error_size > 0 else b""
    available = capacity - len(title)
    if output_size + error_size < available:
        return stdout + title + stderr
    if output_size > available // 2 and error_size > available // 2:
        size = available - len(ERROR_TRUNCATED) - len(OUTPUT_TRUNCATED)
        return stdout[: size // 2] + OUTPUT_TRUNCATED + title + stderr[: size // 2] + ERROR_TRUNCATED
    if output_size <= available // 2:
        size = available - len(ERROR_TRUNCATED)
        return stdout + title + stderr[: size - output_size] + ERROR_TRUNCATED
    size = available - len(OUTPUT_TRUNCATED)
    return stdout[: size - error_size] + OUTPUT_TRUNCATED + title + stderr


def execution_timeout(value: Any) -> int:
    """pluginutil.ValidateExecutionTimeout of the document's executionTimeout (a string, or a list of one)."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    number = DEFAULT_EXECUTION_TIMEOUT
    if isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            try:
                number = int(float(value))
            except ValueError:
                number = DEFAULT_EXECUTION_TIMEOUT
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = int(value)
    if not MIN_EXECUTION_TIMEOUT <= number <= MAX_EXECUTION_TIMEOUT:
        number = DEFAULT_EXECUTION_TIMEOUT
    return number


def exit_error(returncode: int) -> tuple[int, str]:
    """The agent's exit code and Go's error text for a process that ended with RETURNCODE (Popen's: -N for signal N).
    A process killed by a signal has ExitStatus -1 (executers.go:356-376)."""
    if returncode >= 0:
        return returncode, f"exit status {returncode}"
    number = -returncode
    name = SIGNAL_NAMES.get(number, f"signal {number}")  # Go prints "signal N" for the ones it has no name for
    return -1, f"signal: {name}"


def text(data: bytes) -> str:
    # Go's JSON encoder writes invalid UTF-8 (a cut in the middle of a character) as U+FFFD.
    return data.decode("utf-8", errors="replace")


def iso_time(moment: dt.datetime | None) -> str:
    if moment is None:
        return ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def elapsed(start: dt.datetime | None, end: dt.datetime | None) -> str:
    if start is None or end is None:
        return ""
    return f"PT{(end - start).total_seconds():.3f}S"


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


# ---------------------------------------------------------------------------------------------------------------------
# Files inside a node, every path resolved in the node's root


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def open_in_root(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """openat2(ROOT_FD, PATH, RESOLVE_IN_ROOT): '..' and absolute symlinks stay inside the node's root."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(SYS_OPENAT2, root_fd, path.encode(), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), path)
    return fd


def make_directories(root_fd: int, path: str, mode: int) -> None:
    """os.MkdirAll(PATH, MODE) inside the node's root."""
    parts = [part for part in path.split("/") if part]
    for index in range(len(parts)):
        prefix = "/" + "/".join(parts[: index + 1])
        try:
            os.close(open_in_root(root_fd, prefix, os.O_PATH | os.O_DIRECTORY))
            continue
        except FileNotFoundError:
            pass
        parent = open_in_root(root_fd, "/" + "/".join(parts[:index]), os.O_PATH | os.O_DIRECTORY)
        try:
            os.mkdir(parts[index], mode, dir_fd=parent)
        except FileExistsError:
            pass
        finally:
            os.close(parent)


def write_in_root(root_fd: int, path: str, data: bytes, mode: int) -> None:
    fd = open_in_root(root_fd, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------------------
# The box's nodes


class Agent:
    """A node's agent stand-in as the host sees it: its PID, working directory and environment."""

    def __init__(self, host_pid: int) -> None:
        self.host_pid = host_pid
        raw = Path(f"/proc/{host_pid}/environ").read_bytes()
        self.environment = dict(
            entry.decode(errors="surrogateescape").split("=", 1) for entry in raw.split(b"\0") if b"=" in entry
        )


class Nodes:
    def __init__(self, box_dir: Path) -> None:
        self.directory = box_dir / "nodes"

    def pid(self, instance_id: str) -> int | None:
        """The node's PID 1 on the host while it lives."""
        if not INSTANCE_ID.match(instance_id):
            return None
        try:
            pid = int((self.directory / instance_id / "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def region(self, instance_id: str) -> str | None:
        try:
            state = json.loads((self.directory / instance_id / "imds.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return state.get("meta-data", {}).get("placement", {}).get("region")

    def managed(self, instance_id: str, region: str) -> bool:
        """Whether SSM in REGION manages the node: it is running, and in that region."""
        return self.pid(instance_id) is not None and self.region(instance_id) in (None, region)

    def cgroup(self, instance_id: str) -> Path:
        return Path((self.directory / instance_id / "cgroup").read_text().strip())

    def agent(self, instance_id: str, pid1: int) -> Agent | None:
        """The running agent stand-in, or None while its unit is not active."""
        shown = subprocess.run(
            ["nsenter", "-t", str(pid1), "-a", "--", "systemctl", "show", "--property=MainPID,ActiveState", AGENT_UNIT],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": NODE_PATH},
        )
        properties = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
        main = int(properties.get("MainPID") or 0)
        if properties.get("ActiveState") != "active" or main == 0:
            return None
        procs = self.cgroup(instance_id) / "system.slice" / AGENT_UNIT / "cgroup.procs"
        for host_pid in procs.read_text().split():
            with contextlib.suppress(FileNotFoundError):
                status = Path(f"/proc/{host_pid}/status").read_text()
                nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
                if int(nspid[-1]) == main:
                    return Agent(int(host_pid))
        return None


def platform(root: Path) -> tuple[str, str]:
    """/etc/os-release's NAME and VERSION_ID, quotes removed (go-ini's reading)."""
    values: dict[str, str] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in (root / "etc" / "os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip('"').strip("'")
    return values.get("NAME", ""), values.get("VERSION_ID", "")


# ---------------------------------------------------------------------------------------------------------------------
# Run Command on moto's SSM


class Invocation:
    """One node's copy of a command, as the service reports it."""

    def __init__(self, command: Any, instance_id: str) -> None:
        self.command = command
        self.instance_id = instance_id
        self.lock = threading.Lock()
        self.status = "Pending"
        self.details = "Pending"
        self.response_code = -1
        self.started: dt.datetime | None = None
        self.ended: dt.datetime | None = None
        self.stdout = b""
        self.stderr = b""

    def set(self, status: str, details: str, **changes: Any) -> None:
        with self.lock:
            self.status, self.details = status, details
            for name, value in changes.items():
                setattr(self, name, value)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return dict(vars(self))

    def get_response(self) -> dict[str, Any]:
        """GetCommandInvocation's answer."""
        state = self.snapshot()
        over = state["status"] in FINAL
        stdout = string_prefix(state["stdout"], MAX_OUTPUT) if over else b""
        stderr = string_prefix(string_prefix(state["stderr"], MAX_OUTPUT), MAX_ERROR_CONTENT) if over else b""
        command = self.command
        return {
            "CommandId": command.command_id,
            "InstanceId": self.instance_id,
            "Comment": command.comment,
            "DocumentName": command.document_name,
            "DocumentVersion": "$DEFAULT",
            "PluginName": PLUGIN_NAME,
            "ResponseCode": state["response_code"],
            "ExecutionStartDateTime": iso_time(state["started"]),
            "ExecutionElapsedTime": elapsed(state["started"], state["ended"]),
            "ExecutionEndDateTime": iso_time(state["ended"]),
            "Status": state["status"],
            "StatusDetails": state["details"],
            "StandardOutputContent": text(stdout),
            "StandardOutputUrl": "",
            "StandardErrorContent": text(stderr),
            "StandardErrorUrl": "",
            "CloudWatchOutputConfig": {"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": False},
        }

    def list_response(self, details: bool) -> dict[str, Any]:
        """One entry of ListCommandInvocations; its plugin only with Details."""
        state = self.snapshot()
        command = self.command
        entry: dict[str, Any] = {
            "CommandId": command.command_id,
            "InstanceId": self.instance_id,
            "InstanceName": "",
            "Comment": command.comment,
            "DocumentName": command.document_name,
            "DocumentVersion": "$DEFAULT",
            "RequestedDateTime": command.requested_date_time,
            "Status": state["status"],
            "StatusDetails": state["details"],
            "TraceOutput": "",
            "StandardOutputUrl": "",
            "StandardErrorUrl": "",
            "CommandPlugins": [],
            "ServiceRole": command.service_role_arn,
            "NotificationConfig": command.notification_config,
            "CloudWatchOutputConfig": {"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": False},
        }
        if details:
            over = state["status"] in FINAL
            output = truncate_output(state["stdout"], state["stderr"]) if over else b""
            plugin = {
                "Name": PLUGIN_NAME,
                "Status": state["status"],
                "StatusDetails": state["details"],
                "ResponseCode": state["response_code"],
                "ResponseStartDateTime": state["started"],
                "ResponseFinishDateTime": state["ended"],
                "Output": text(output),
                "StandardOutputUrl": "",
                "StandardErrorUrl": "",
                "OutputS3Region": command.backend_region,
                "OutputS3BucketName": command.output_s3_bucket_name,
                "OutputS3KeyPrefix": command.output_s3_key_prefix,
            }
            entry["CommandPlugins"] = [{key: value for key, value in plugin.items() if value is not None}]
        return entry


class Delivery:
    """Runs each invocation on its node the way the agent runs AWS-RunShellScript (module docstring)."""

    def __init__(self, box_dir: Path) -> None:
        self.nodes = Nodes(box_dir)

    def start(self, command: Any) -> None:
        for invocation in command.invocations:
            threading.Thread(target=self.deliver, args=(invocation,), daemon=True).start()

    def deliver(self, invocation: Invocation) -> None:
        try:
            self._deliver(invocation)
        except Exception as error:  # noqa: BLE001 - the invocation must end, and the log must say why
            print(f"run command: {invocation.instance_id}: delivery failed: {error!r}", file=sys.stderr, flush=True)
            invocation.set("Failed", "Undeliverable", ended=now())

    def _deliver(self, invocation: Invocation) -> None:
        command = invocation.command
        deadline = command.requested_monotonic + command.timeout_seconds + command.execution_timeout
        while True:
            pid1 = self.nodes.pid(invocation.instance_id)
            if pid1 is None:
                invocation.set("Failed", "Undeliverable")
                return
            agent = self.nodes.agent(invocation.instance_id, pid1)
            if agent is not None:
                break
            if time.monotonic() >= deadline:
                invocation.set("TimedOut", "DeliveryTimedOut")
                return
            time.sleep(0.5)
        self._run(invocation, pid1, agent)

    def _run(self, invocation: Invocation, pid1: int, agent: Agent) -> None:
        command = invocation.command
        instance_id = invocation.instance_id
        directory = f"{AGENT_DATA}/{instance_id}/document/orchestration/{command.command_id}/{PLUGIN_DIRECTORY}"
        script = f"{directory}/{SCRIPT_NAME}"
        root_fd = os.open(f"/proc/{agent.host_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            old_umask = os.umask(0o022)  # the agent's, under systemd
            try:
                make_directories(root_fd, directory, DIRECTORY_MODE)
                write_in_root(root_fd, script, ("\n".join(command.commands) + "\n").encode(), SCRIPT_MODE)
                flags = os.O_APPEND | os.O_WRONLY | os.O_CREAT
                stdout_file = open_in_root(root_fd, f"{directory}/stdout", flags, OUTPUT_MODE)
                stderr_file = open_in_root(root_fd, f"{directory}/stderr", flags, OUTPUT_MODE)
            finally:
                os.umask(old_umask)
        finally:
            os.close(root_fd)
        name, version = platform(Path(f"/proc/{agent.host_pid}/root"))
        environment = {
            **agent.environment,
            "SSM_COMMAND_ID": command.command_id,
            "AWS_SSM_INSTANCE_ID": instance_id,
            "AWS_SSM_REGION_NAME": self.nodes.region(instance_id) or command.backend_region,
            "AWS_SSM_PLATFORM_NAME": name,
            "AWS_SSM_PLATFORM_VERSION": version,
        }
        agent_cgroup = self.nodes.cgroup(instance_id) / "system.slice" / AGENT_UNIT / "cgroup.procs"
        spec = {"argv": ["sh", "-c", script], "env": environment}
        report_read, report_write = os.pipe()
        invocation.set("InProgress", "InProgress", started=now())
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(pid1), f"/proc/{agent.host_pid}/cwd", str(agent_cgroup),
             json.dumps(spec), str(report_write)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={}, process_group=0,
            pass_fds=(report_write,),
        )  # fmt: skip
        os.close(report_write)
        with os.fdopen(report_read) as report:
            child = int(report.read() or 0)  # the command's PID on the host, its process group's id
        stop = Stop()
        outputs = {"stdout": bytearray(), "stderr": bytearray()}
        pumps = [
            threading.Thread(target=pump, args=(process.stdout, stdout_file, outputs["stdout"], stop), daemon=True),
            threading.Thread(target=pump, args=(process.stderr, stderr_file, outputs["stderr"], stop), daemon=True),
        ]
        for thread in pumps:
            thread.start()
        deadline = started + command.execution_timeout
        timed_out = False
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
            for thread in pumps:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            timed_out = any(thread.is_alive() for thread in pumps)
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            # Go's writers stop taking output at the timeout (executers.go:326-327): nothing after it is kept.
            stop.set()
            if child:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child, signal.SIGKILL)
            process.wait()
            code, error = STOPPED_PREEMPTIVELY, None
        else:
            code, error = exit_error(process.returncode) if process.returncode else (0, None)
        stdout, stderr = bytes(outputs["stdout"]), bytes(outputs["stderr"])
        if code == 0:
            status, details = "Success", "Success"
        elif code == STOPPED_PREEMPTIVELY:
            status, details = "TimedOut", "ExecutionTimedOut"
        else:
            status, details = "Failed", "Failed"
            line = f"failed to run commands: {error}".encode()
            with contextlib.suppress(OSError):
                os.write(stderr_file, line)
            stderr += line
        for fd in (stdout_file, stderr_file):
            os.close(fd)
        invocation.set(status, details, response_code=code, stdout=stdout, stderr=stderr, ended=now())


class Stop:
    """Set once a command's output is no longer kept; a pump writes only while holding the lock and not stopped, so
    that after set() returns no pump touches its file descriptor again."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopped = False

    def set(self) -> None:
        with self.lock:
            self.stopped = True


def pump(pipe: Any, file_fd: int, sink: bytearray, stop: Stop) -> None:
    """Copy a command's stream to its file in the node and to SINK until it closes; nothing once STOP is set."""
    while chunk := os.read(pipe.fileno(), 65536):
        with stop.lock:
            if stop.stopped:
                continue
            with contextlib.suppress(OSError):
                os.write(file_fd, chunk)
            sink += chunk
    pipe.close()


def install_run_command(box_dir: Path) -> Delivery:
    """Patch moto's SSM: SendCommand delivers to the box's nodes; GetCommandInvocation and ListCommands report what
    happened; ListCommandInvocations, which moto lacks, is added."""
    from moto.core.responses import ActionResult
    from moto.ssm import models, responses
    from moto.ssm.exceptions import SSMException

    delivery = Delivery(box_dir)

    class BoxCommand(models.Command):
        # moto's model metaclass files a model under the second part of its module's name (moto/core/base_backend.py,
        # InstanceTrackerMeta): this one belongs to SSM's.
        __module__ = models.__name__

        def __init__(self, *, commands: list[str], timeout: int, **arguments: Any) -> None:
            self.commands = commands
            self.execution_timeout = timeout
            self.requested_monotonic = time.monotonic()
            requested = list(dict.fromkeys(arguments.get("instance_ids") or []))
            super().__init__(**arguments)
            # moto keeps the ids in a set's order: keep the caller's, then the targets' (box nodes only).
            self.instance_ids = requested + [i for i in self.instance_ids if i not in requested]
            self.invocations = [Invocation(self, instance_id) for instance_id in self.instance_ids]
            self.completed_count = 0
            self.target_count = len(self.instance_ids)
            self.expires_after = self.requested_date_time + dt.timedelta(seconds=self.timeout_seconds + timeout)

        def _get_instance_ids_from_targets(self) -> list[str]:
            if not self.targets:
                return []
            found = super()._get_instance_ids_from_targets()
            return [i for i in found if delivery.nodes.managed(i, self.backend_region)]

        def invocation_response(self, instance_id: str, plugin_name: str) -> dict[str, Any]:
            return {}  # replaced by Invocation objects once moto's constructor is done

        def get_invocation(self, instance_id: str, plugin_name: str | None) -> dict[str, Any]:
            for invocation in self.invocations:
                if invocation.instance_id == instance_id and plugin_name in (None, PLUGIN_NAME):
                    return invocation.get_response()
            raise SSMException(
                "InvocationDoesNotExist",
                "The command ID and managed node ID you specified didn't match any invocations.",
            )

        def response_object(self) -> dict[str, Any]:
            answer = super().response_object()
            statuses = [invocation.snapshot() for invocation in self.invocations]
            final = [state for state in statuses if state["status"] in FINAL]
            errors = [s for s in final if s["details"] in ("Failed", "ExecutionTimedOut")]
            delivery_timeouts = [s for s in final if s["details"] == "DeliveryTimedOut"]
            if not statuses or all(s["status"] == "Pending" for s in statuses):
                status = "Pending"
            elif len(final) < len(statuses):
                status = "InProgress"
            elif all(s["status"] == "Success" for s in statuses):
                status = "Success"
            elif errors and all(s["details"] == "ExecutionTimedOut" for s in errors):
                status = "TimedOut"
            else:
                status = "Failed"
            answer.update(
                Status=status,
                StatusDetails={"InProgress": "InProgress"}.get(status, status),
                CompletedCount=len(final),
                ErrorCount=len(errors),
                DeliveryTimedOutCount=len(delivery_timeouts),
                TargetCount=len(statuses),
                TimeoutSeconds=self.timeout_seconds,
            )
            return answer

    def send_command(self: Any, **arguments: Any) -> Any:
        if arguments.get("document_name") != RUN_SHELL_SCRIPT:
            raise SSMException(
                "InvalidDocument",
                f"the box's emulator delivers only {RUN_SHELL_SCRIPT}, not {arguments['document_name']}",
            )
        parameters = arguments.get("parameters") or {}
        commands = parameters.get("commands")
        if not isinstance(commands, list) or not commands or not all(isinstance(c, str) for c in commands):
            raise SSMException("InvalidParameters", "commands is required: a list of strings")
        if parameters.get("workingDirectory") not in (None, [], [""]):
            raise SSMException("InvalidParameters", "the box's emulator does not model workingDirectory")
        unmanaged = [i for i in arguments.get("instance_ids") or [] if not delivery.nodes.managed(i, self.region_name)]
        if unmanaged:
            raise SSMException(
                "InvalidInstanceId",
                f"Instances [{', '.join(f'[{i}]' for i in unmanaged)}] not in a valid state for account "
                f"{self.account_id}",
            )
        command = BoxCommand(
            commands=commands,
            timeout=execution_timeout(parameters.get("executionTimeout")),
            account_id=self.account_id,
            backend_region=self.region_name,
            **arguments,
        )
        self._commands.append(command)
        delivery.start(command)
        return command

    def list_command_invocations(self: Any) -> Any:
        if self._get_param("Filters"):
            raise SSMException("InvalidFilterKey", "the box's emulator does not model Filters")
        command_id = self._get_param("CommandId")
        instance_id = self._get_param("InstanceId")
        details = bool(self._get_param("Details", False))
        limit = int(self._get_param("MaxResults") or 50)
        start = int(self._get_param("NextToken") or 0)
        commands = self.ssm_backend.list_commands(command_id, None)
        found = [
            invocation
            for command in commands
            for invocation in getattr(command, "invocations", [])
            if isinstance(invocation, Invocation) and instance_id in (None, invocation.instance_id)
        ]
        page = found[start : start + limit]
        answer: dict[str, Any] = {"CommandInvocations": [i.list_response(details) for i in page]}
        if start + limit < len(found):
            answer["NextToken"] = str(start + limit)
        return ActionResult(answer)

    models.SimpleSystemManagerBackend.send_command = send_command
    responses.SimpleSystemManagerResponse.list_command_invocations = list_command_invocations
    return delivery


# ---------------------------------------------------------------------------------------------------------------------
# Certificates and listeners


def make_certificates(directory: Path, names: list[str]) -> tuple[Path, Path]:
    """A CA (its PEM at DIRECTORY/ca.pem) and a server certificate for NAMES, signed by it: (certificate, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    end = start + dt.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpufleet box AWS emulator CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name) for name in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )  # digitalSignature
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certificate_file = directory / "server.pem"
    key_file = directory / "server.key"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certificate_file, key_file


def certificate_names(names: list[str], regions: list[str]) -> list[str]:
    found = list(names)
    for region in regions:
        found += [f"*.{region}.amazonaws.com", f"*.s3.{region}.amazonaws.com"]
    found += ["*.amazonaws.com", "*.s3.amazonaws.com"]
    return list(dict.fromkeys(found))


@contextlib.contextmanager
def network_namespace(path: str) -> Iterator[None]:
    """This thread in the network namespace at PATH (setns(2)), then back in its own."""
    with open("/proc/thread-self/ns/net") as own, open(path) as target:
        if _libc.setns(target.fileno(), CLONE_NEWNET) != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number), path)
        try:
            yield
        finally:
            if _libc.setns(own.fileno(), CLONE_NEWNET) != 0:
                number = ctypes.get_errno()
                raise OSError(number, os.strerror(number), "/proc/thread-self/ns/net")


def serve(arguments: argparse.Namespace) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from tests.box import cloudformation_emulation, fleet_emulation, fsx_emulation, price_list

    box_dir = Path(arguments.box_dir)
    names = [line.strip() for line in Path(arguments.names_file).read_text().splitlines() if line.strip()]
    certificate, key = make_certificates(box_dir / "aws", certificate_names(names, arguments.region))
    install_run_command(box_dir)
    fleet_emulation.install()
    fsx_emulation.install()
    cloudformation_emulation.install()
    application = price_list.with_price_list(DomainDispatcherApplication(create_backend_app))
    plain = make_server("127.0.0.1", 0, application, threaded=True, request_handler=MotoRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    ipaddress.IPv4Address(arguments.endpoint_address)
    with network_namespace(arguments.switch_netns):
        secure = make_server(
            arguments.endpoint_address, 443, application, threaded=True, request_handler=MotoRequestHandler
        )
    # TLS with the handshake in each request's thread, not in the one that accepts (a client that never finishes its
    # handshake would otherwise stop every other).
    secure.socket = context.wrap_socket(secure.socket, server_side=True, do_handshake_on_connect=False)
    secure.ssl_context = context
    for server in (plain, secure):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{plain.server_port}"
    ready = Path(arguments.ready_file)
    temporary = ready.with_name(ready.name + ".tmp")
    temporary.write_text(json.dumps({"url": url}))
    temporary.rename(ready)
    print(f"aws emulator: {url}, https://{arguments.endpoint_address}:443 in {arguments.switch_netns}", flush=True)
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    while not stopping.wait(1):
        pass
    for server in (plain, secure):
        server.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.box.aws_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--box-dir", required=True)
    parser.add_argument("--switch-netns", required=True)
    parser.add_argument("--endpoint-address", required=True)
    parser.add_argument("--names-file", required=True)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--region", action="append", required=True)
    serve(parser.parse_args(argv))


if __name__ == "__main__":
    main()
