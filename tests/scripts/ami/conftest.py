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
}

KERNEL = "5.4.0-1045-aws"

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
    "apt-get": 'for a in "$@"; do [[ "$a" == *=* && "$a" != -* ]] && echo "${a#*=}" >"$S/packages/${a%%=*}"; done\n'
    "exit 0",
    "yum": "exit 0",
    "dnf": "exit 0",
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
    'while [[ $# -gt 0 ]]; do [[ "$1" == --output ]] && out="$2"; shift; done\n'
    'cp "$S/download" "$out"',
}


def contract_env(os_family: str = "ubuntu", os_version: str = "18.04", nvswitch: str = "1") -> dict[str, str]:
    env = {
        "GPUFLEET_PROFILE": "p4d-ubuntu1804-cuda11",
        "GPUFLEET_OS_FAMILY": os_family,
        "GPUFLEET_OS_VERSION": os_version,
        "GPUFLEET_NVSWITCH": nvswitch,
    }
    for key, version in PINNED.items():
        upper = key.upper()
        env[f"GPUFLEET_{upper}_VERSION"] = version
        env[f"GPUFLEET_{upper}_URL"] = f"https://downloads.example/{key}-{version}.bin"
        env[f"GPUFLEET_{upper}_SHA256"] = ""
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
def scripts_dir() -> Path:
    return SCRIPTS_DIR


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def pinned() -> dict[str, str]:
    """The reference profile's pinned versions, in the contract's component-key order."""
    return dict(PINNED)
