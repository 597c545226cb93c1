"""A sandbox for the AMI provisioning scripts: stub system commands on PATH whose answers come from a state
directory, a fake GPUFLEET_ROOT tree, and the full contract environment of the reference p4d Ubuntu profile."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS_DIR = REPO / "scripts" / "ami"
COMMON_LIB = SCRIPTS_DIR / "lib" / "common.sh"

PINNED = {
    "driver": "450.80.02",
    "fabric_manager": "450.80.02",
    "cuda": "11.0.3",
    "cudnn": "8.0.5.39",
    "nccl": "2.7.8",
    "efa_installer": "1.14.1",
    "aws_ofi_nccl": "1.1.4",
    "nccl_tests": "2.10.0",
    "fsx_lustre": "2.10.8",
    "onednn": "2.2.4",
    "container_toolkit": "1.4.0",
    "aws_cli": "2.36.11",
    "cloudwatch_agent": "1.300071.0b1720",
}

# The signing keys of the reference profile's AWS tools (ami/profiles/p4d-ubuntu1804-cuda11.yaml): component -> (key
# URL, fingerprint); every other component gets both empty, as the Packer template passes a profile without them.
SIGNING_KEYS = {
    "aws_cli": ("", "FB5DB77FD5C118B80511ADA8A6310ACC4672475C"),
    "cloudwatch_agent": (
        "https://amazoncloudwatch-agent.s3.amazonaws.com/assets/amazon-cloudwatch-agent.gpg",
        "937616F3450B7D806CBD9725D58167303B789C72",
    ),
}

KERNEL = "5.4.0-1045-aws"
# /proc/version of that kernel: Ubuntu 18.04's default gcc built it, so it names no "gcc-N".
PROC_VERSION = (
    f"Linux version {KERNEL} (buildd@lcy01-amd64-024) (gcc version 7.5.0 (Ubuntu 7.5.0-3ubuntu1~18.04)) "
    "#47~18.04.1-Ubuntu SMP Tue May 11 17:39:35 UTC 2021\n"
)

# What ami/packages.yaml resolves for the reference profile p4d-ubuntu1804-cuda11 (tests/ami/test_packages.py
# checks the same values against the data), as the Packer template passes it.
PACKAGE_ENV = {
    "GPUFLEET_FABRIC_MANAGER_PACKAGE": "nvidia-fabricmanager-450",
    "GPUFLEET_CUDNN_PACKAGE": "libcudnn8",
    "GPUFLEET_CUDNN_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
    "GPUFLEET_CUDNN_REPOSITORIES": "https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu1804/"
    "x86_64/7fa2af80.pub|https://developer.download.nvidia.com/compute/machine-learning/repos/ubuntu1804/x86_64 /",
    "GPUFLEET_CUDNN_DEV_PACKAGE": "libcudnn8-dev",
    "GPUFLEET_CUDNN_DEV_PACKAGE_VERSION": "8.0.5.39-1+cuda11.0",
    "GPUFLEET_FSX_LUSTRE_PACKAGE": "lustre-client-utils",
    "GPUFLEET_FSX_LUSTRE_REPOSITORIES": "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/"
    "fsx-ubuntu-public-key.asc|https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu bionic main",
    "GPUFLEET_CONTAINER_TOOLKIT_PACKAGE": "nvidia-container-toolkit",
    "GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES": "https://nvidia.github.io/libnvidia-container/gpgkey|"
    "https://nvidia.github.io/libnvidia-container/stable/ubuntu18.04/$(ARCH) /;"
    "https://nvidia.github.io/nvidia-container-runtime/gpgkey|"
    "https://nvidia.github.io/nvidia-container-runtime/stable/ubuntu18.04/$(ARCH) /",
    "GPUFLEET_CONTAINER_RUNTIME_PACKAGE": "nvidia-container-runtime",
    "GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION": "3.4.0",
}
# The same for p4d-al2-cuda11 (Amazon Linux 2), over PACKAGE_ENV.
AMZN2_PACKAGE_ENV = {
    "GPUFLEET_FABRIC_MANAGER_PACKAGE": "nvidia-fabricmanager-450",
    "GPUFLEET_CUDNN_PACKAGE": "libcudnn8",
    "GPUFLEET_CUDNN_PACKAGE_VERSION": "8.0.5.39-1.cuda11.0",
    "GPUFLEET_CUDNN_REPOSITORIES": "",
    "GPUFLEET_CUDNN_DEV_PACKAGE": "libcudnn8-devel",
    "GPUFLEET_CUDNN_DEV_PACKAGE_VERSION": "8.0.5.39-1.cuda11.0",
    "GPUFLEET_FSX_LUSTRE_PACKAGE": "lustre-client",
    "GPUFLEET_FSX_LUSTRE_REPOSITORIES": "",
    "GPUFLEET_FSX_LUSTRE_EXTRAS_TOPIC": "lustre2.10",
    "GPUFLEET_CONTAINER_TOOLKIT_PACKAGE": "nvidia-container-toolkit",
    "GPUFLEET_CONTAINER_TOOLKIT_REPOSITORIES": "https://nvidia.github.io/nvidia-container-runtime/stable/amzn2/"
    "nvidia-container-runtime.repo",
    "GPUFLEET_CONTAINER_RUNTIME_PACKAGE": "nvidia-container-runtime",
    "GPUFLEET_CONTAINER_RUNTIME_PACKAGE_VERSION": "3.4.0",
}

# The python section of the reference profile as the Packer template passes it (gpufleet/ami/render.py
# python_environment): uv on every image, no PyTorch.
UV_VERSION = "0.12.21"
PYTHON_ENV = {
    "GPUFLEET_UV_VERSION": UV_VERSION,
    "GPUFLEET_UV_URL": f"https://github.com/astral-sh/uv/releases/download/{UV_VERSION}/uv-x86_64-unknown-linux-gnu.tar.gz",
    "GPUFLEET_UV_SHA256": "23f02075b652bb1df64178cfae41b5caf160822e720e2663568f3f5d63bc52c0",
    "GPUFLEET_PYTORCH_VERSION": "",
    "GPUFLEET_PYTORCH_INDEX_URL": "",
    "GPUFLEET_PYTORCH_PYTHON": "",
}

YUM_STUB = r"""[[ "$1" == install ]] || exit 0
[[ -f "$S/available" ]] || exit 0
specs=()
for a in "${@:2}"; do [[ "$a" == -* || "$a" == */* ]] || specs+=("$a"); done
for spec in "${specs[@]}"; do
  found=""
  while read -r name evr; do
    if [[ "$spec" == "$name" || "$spec" == "$name-$evr" || "$spec" == "$name-${evr%%-*}" ]]; then found="$evr"; fi
  done <"$S/available"
  [[ -n "$found" ]] || { echo "No package $spec available." >&2; echo "Error: Nothing to do" >&2; exit 1; }
done
for spec in "${specs[@]}"; do
  while read -r name evr; do
    if [[ "$spec" == "$name" || "$spec" == "$name-$evr" || "$spec" == "$name-${evr%%-*}" ]]; then
      echo "$evr" >"$S/packages/$name"
    fi
  done <"$S/available"
done"""

# The loader cache as ldconfig keeps it: `ldconfig` rebuilds it from the directories listed in
# etc/ld.so.conf.d/*.conf, `ldconfig -p` prints what the last rebuild saw, in ldconfig's format.
LDCONFIG_STUB = r"""if [[ "${1:-}" == -p ]]; then
  echo "$(cat "$S/ld.so.cache" 2>/dev/null | wc -l) libs found in cache \`/etc/ld.so.cache'"
  cat "$S/ld.so.cache" 2>/dev/null
  exit 0
fi
: >"$S/ld.so.cache"
for conf in "$GPUFLEET_ROOT"/etc/ld.so.conf.d/*.conf; do
  [[ -f "$conf" ]] || continue
  while read -r dir; do
    for lib in "$GPUFLEET_ROOT$dir"/lib*.so*; do
      [[ -e "$lib" || -L "$lib" ]] || continue
      printf '\t%s (libc6,x86-64) => %s\n' "${lib##*/}" "$dir/${lib##*/}" >>"$S/ld.so.cache"
    done
  done <"$conf"
done"""

# Every stub appends "NAME ARGS" to $STUB_LOG, then answers from files under $STUB_STATE.
STUB_PREAMBLE = '#!/usr/bin/env bash\nprintf "%s\\n" "$(basename "$0") $*" >>"$STUB_LOG"\nS="$STUB_STATE"\n'
STUBS = {
    "uname": f'echo "{KERNEL}"',
    "ldconfig": LDCONFIG_STUB,
    "apt-mark": 'if [[ "$1" == showhold ]]; then cat "$S/held" 2>/dev/null; fi; exit 0',
    "dpkg-query": 'name="${!#}"; [[ -f "$S/packages/$name" ]] || exit 1\n'
    'echo "install ok installed $(<"$S/packages/$name")"',
    "rpm": 'name="${!#}"\nif [[ -f "$S/packages/$name" ]]; then cat "$S/packages/$name"; '
    'else echo "package $name is not installed"; exit 1; fi',
    "apt-cache": 'if [[ "$1" == madison && -f "$S/madison/$2" ]]; then\n'
    '  while read -r v; do echo " $2 | $v | https://repo/ Packages"; done <"$S/madison/$2"; fi',
    # Records NAME=VERSION arguments as installed (the value after -o is a configuration item, not a package);
    # a package with state provides/NAME also puts the command named there on PATH.
    "apt-get": 'while [[ $# -gt 0 ]]; do a="$1"; shift; [[ "$a" == -o ]] && { shift; continue; }\n'
    '  [[ "$a" == *=* && "$a" != -* ]] || continue\n'
    '  echo "${a#*=}" >"$S/packages/${a%%=*}"\n'
    '  if [[ -f "$S/provides/${a%%=*}" ]]; then\n'
    '    b="$(dirname "$0")/$(<"$S/provides/${a%%=*}")"; printf "#!/bin/sh\\n" >"$b"; chmod +x "$b"; fi\n'
    "done\nexit 0",
    # Like yum/dnf: "install NAME-VERSION" resolves against $S/available (lines "NAME VERSION-RELEASE"); a spec
    # that names no available package fails the whole transaction ("No package ... available"). Without
    # $S/available every install succeeds.
    "yum": YUM_STUB,
    "dnf": YUM_STUB,
    "systemctl": 'case "$1" in\n'
    '  is-enabled) if [[ -f "$S/enabled/$2" ]]; then echo enabled; else echo disabled; exit 1; fi ;;\n'
    '  enable) touch "$S/enabled/$2" ;;\n'
    "esac",
    "modinfo": '[[ -f "$S/modinfo" ]] || { echo "modinfo: ERROR: Module nvidia not found." >&2; exit 1; }\n'
    'cat "$S/modinfo"',
    "nvidia-smi": '[[ -f "$S/nvidia-smi" ]] || { echo "NVIDIA-SMI has failed because it could not communicate '
    'with the NVIDIA driver." ; exit 9; }\ncat "$S/nvidia-smi"',
    "fi_info": 'exit "$(cat "$S/fi_info.rc" 2>/dev/null || echo 0)"',
    "nvcc": 'cat "$S/nvcc"',
    "curl": '[[ -f "$S/curl.fail" ]] && { echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }\n'
    # The file for a URL is downloads/BASENAME where the test gave one, else download.
    'out=""; while [[ $# -gt 0 ]]; do [[ "$1" == --output ]] && out="$2"; url="$1"; shift; done\n'
    'src="$S/download"; [[ -f "$S/downloads/${url##*/}" ]] && src="$S/downloads/${url##*/}"\n'
    'if [[ -n "$out" ]]; then cp "$src" "$out"; else cat "$src"; fi',
    # --import takes any key; --verify prints the status lines in $S/gpg.status (default: none, a failed check) as
    # --status-fd 1 does; --dearmor writes its input to --output.
    # `python3 -m venv DIR` as a python3 with venv and ensurepip does it: DIR/bin/pip answers --version; with state
    # venv.fail (its text the error) python3 fails as Ubuntu's does without python3-venv; with pip.fail the
    # virtualenv's pip fails. Any other python3 call fails (the scripts make none).
    "python3": 'if [[ "${1:-} ${2:-}" == "-m venv" ]]; then\n'
    '  if [[ -f "$S/venv.fail" ]]; then cat "$S/venv.fail"; exit 1; fi\n'
    '  mkdir -p "$3/bin"\n'
    '  if [[ -f "$S/pip.fail" ]]; then printf "#!/bin/sh\\ncat %s >&2; exit 1\\n" "$S/pip.fail" >"$3/bin/pip"\n'
    '  else printf "#!/bin/sh\\necho pip 24.0 from %s/lib/python3.12/site-packages/pip \\\\(python 3.12\\\\)\\n" '
    '"$3" >"$3/bin/pip"; fi\n'
    '  chmod +x "$3/bin/pip"; exit 0\nfi\nexit 1',
    "gpg": 'case " $* " in\n'
    '  *" --import "*) exit 0 ;;\n'
    '  *" --verify "*) cat "$S/gpg.status" 2>/dev/null; [[ -f "$S/gpg.status" ]]; exit ;;\n'
    "esac\n"
    'while [[ $# -gt 0 ]]; do [[ "$1" == --output ]] && out="$2"; shift; done\ncat >"$out"',
}


def contract_env(os_family: str = "ubuntu", os_version: str = "18.04", nvswitch: str = "1") -> dict[str, str]:
    env = {
        "GPUFLEET_AMI_PROFILE": "p4d-ubuntu1804-cuda11",
        "GPUFLEET_OS_FAMILY": os_family,
        "GPUFLEET_OS_VERSION": os_version,
        "GPUFLEET_NVSWITCH": nvswitch,
    }
    for key, version in PINNED.items():
        upper = key.upper()
        env[f"GPUFLEET_{upper}_VERSION"] = version
        env[f"GPUFLEET_{upper}_URL"] = f"https://downloads.example/{key}-{version}.bin"
        env[f"GPUFLEET_{upper}_SHA256"] = ""
        key_url, fingerprint = SIGNING_KEYS.get(key, ("", ""))
        env[f"GPUFLEET_{upper}_GPG_KEY_URL"] = key_url
        env[f"GPUFLEET_{upper}_GPG_KEY_FINGERPRINT"] = fingerprint
    env.update(PACKAGE_ENV)
    env.update(PYTHON_ENV)
    return env


@dataclass
class Sandbox:
    root: Path
    state: Path
    bin: Path
    log: Path
    env: dict[str, str]

    def stub(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(STUB_PREAMBLE + body + "\n")
        path.chmod(0o755)

    def write(self, relative: str, text: str, executable: bool = False) -> Path:
        """A file inside the fake GPUFLEET_ROOT tree."""
        path = self.root / relative.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if executable:
            path.chmod(0o755)
        return path

    def set_state(self, name: str, text: str) -> None:
        path = self.state / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def set_package(self, name: str, version: str) -> None:
        self.set_state(f"packages/{name}", version + "\n")

    def write_proc_version(self, text: str = PROC_VERSION) -> None:
        """/proc/version of the running kernel (02-nvidia-driver.sh reads the kernel's compiler from it)."""
        self.write("/proc/version", text)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def clear_calls(self) -> None:
        self.log.unlink(missing_ok=True)

    def run(self, script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPTS_DIR / script)],
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def bash(self, snippet: str) -> subprocess.CompletedProcess[str]:
        """Run SNIPPET with the common library sourced, as the scripts source it."""
        return subprocess.run(
            ["bash", "-c", f'set -euo pipefail; source "{COMMON_LIB}"; {snippet}'],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    root, state, stub_bin = tmp_path / "root", tmp_path / "state", tmp_path / "bin"
    for directory in (root, state / "packages", state / "enabled", state / "madison", stub_bin):
        directory.mkdir(parents=True)
    log = tmp_path / "calls.log"
    env = {
        "PATH": f"{stub_bin}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LC_ALL": "C",
        "GPUFLEET_ROOT": str(root),
        "STUB_STATE": str(state),
        "STUB_LOG": str(log),
        **contract_env(),
    }
    box = Sandbox(root=root, state=state, bin=stub_bin, log=log, env=env)
    for name, body in STUBS.items():
        box.stub(name, body)
    return box


@pytest.fixture
def amazon_linux_2(sandbox: Sandbox) -> Sandbox:
    """The sandbox with the contract environment of p4d-al2-cuda11's OS and packages."""
    sandbox.env.update(GPUFLEET_OS_FAMILY="amzn", GPUFLEET_OS_VERSION="2", **AMZN2_PACKAGE_ENV)
    return sandbox


@pytest.fixture
def scripts_dir() -> Path:
    return SCRIPTS_DIR


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def pinned() -> dict[str, str]:
    """The reference profile's pinned versions, in the contract's component-key order."""
    return dict(PINNED)
