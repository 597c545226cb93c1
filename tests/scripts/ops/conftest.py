"""Stub commands (nvidia-smi, dmesg, systemctl, fi_info, mpirun, gpufleet nccl-report) on PATH for the node scripts.

Each stub's behaviour comes from STUB_* environment variables, and each call is appended to $STUB_LOG, so a test
can both steer and inspect what a script ran. The run scripts (start-run.sh, stop-run.sh) and the checkpoint hook
(save-checkpoint.sh) act on the node's systemd, IMDS and folders instead: they run on the node scripts' fake node
(the `node` fixture of tests/scripts/node/conftest.py).
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scripts.node.conftest import node  # noqa: F401 (a fixture)

STUBS = {
    # Query output as nvidia-smi prints it with --format=csv,noheader: "value, value", [N/A] where a GPU does not
    # report a field (enkore/i3pystatus#776). Bus IDs: p4d.24xlarge's, 00000000:10:1C.0 as in the Xid 63 sample of
    # stas00/ml-engineering compute/accelerator/nvidia/debug.md (the other seven unconfirmed). STUB_REMAP holds
    # correctable:uncorrectable:pending:failure, a line per GPU; STUB_REMAP_MODE picks what GPUs without row remapping
    # print: na ([N/A] values), no-devices, old-driver (exit statuses 6 and 2 unconfirmed; the script reads the text).
    "nvidia-smi": r"""
echo "nvidia-smi $*" >> "$STUB_LOG"
buses=(00000000:10:1C.0 00000000:10:1D.0 00000000:20:1C.0 00000000:20:1D.0
       00000000:90:1C.0 00000000:90:1D.0 00000000:A0:1C.0 00000000:A0:1D.0)
case "$*" in
  -L) for ((i = 0; i < STUB_GPUS; i++)); do echo "GPU $i: NVIDIA A100-SXM4-40GB (UUID: GPU-$i)"; done ;;
  --query-gpu=driver_version*) for ((i = 0; i < STUB_GPUS; i++)); do echo "$STUB_DRIVER"; done ;;
  "--query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader")
    i=0; for count in $STUB_ECC; do echo "${buses[i]}, $count"; i=$((i + 1)); done ;;
  --query-remapped-rows=*)
    case "${STUB_REMAP_MODE:-rows}" in
      no-devices) echo "No devices were found"; exit 6 ;;
      old-driver) echo 'Field "remapped_rows.correctable" is not a valid field to query.'; exit 2 ;;
      na) for ((i = 0; i < STUB_GPUS; i++)); do echo "${buses[i]}, [N/A], [N/A], [N/A], [N/A]"; done ;;
      mig) for ((i = 0; i < STUB_GPUS; i++)); do
          echo "${buses[i]}, [Not Supported], [Not Supported], [Not Supported], [Not Supported]"; done ;;
      rows) i=0
        while IFS=: read -r c u p f; do echo "${buses[i]}, $c, $u, $p, $f"; i=$((i + 1)); done <<< "$STUB_REMAP" ;;
    esac ;;
  --query-gpu=mig.mode.current*)  # STUB_MIG: the mode of each host's GPUs, one word per host (default Disabled)
    read -r -a modes <<< "${STUB_MIG:-}"
    for ((i = 0; i < STUB_GPUS; i++)); do echo "${modes[${STUB_HOST_INDEX:-0}]:-Disabled}"; done ;;
  "topo -m") cat "$STUB_TOPO" ;;  # a capture of tests/fixtures/topo/
  *) echo "unexpected nvidia-smi $*" >&2; exit 9 ;;
esac
""",
    # The kernel ring buffer with its [seconds.micros] prefix; STUB_DMESG adds lines, STUB_DMESG_EXIT=1 is a user who
    # may not read it (kernel.dmesg_restrict=1).
    "dmesg": r"""
echo "dmesg${*:+ $*}" >> "$STUB_LOG"
if [[ "${STUB_DMESG_EXIT:-0}" -ne 0 ]]; then
  echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1
fi
echo "[    5.816071] nvidia: module license 'NVIDIA' taints kernel."
echo "[    6.104593] nvidia-nvlink: Nvlink Core is being initialized, major device number 236"
if [[ -n "${STUB_DMESG:-}" ]]; then printf '%s\n' "$STUB_DMESG"; fi
""",
    "systemctl": r"""
echo "systemctl $*" >> "$STUB_LOG"
[[ "$*" == "is-active nvidia-fabricmanager" ]] || { echo "unexpected systemctl $*" >&2; exit 9; }
echo "$STUB_FM_STATE"
[[ "$STUB_FM_STATE" == active ]]
""",
    "fi_info": r"""
echo "fi_info $*" >> "$STUB_LOG"
if [[ "$STUB_EFA" -eq 0 ]]; then echo "fi_getinfo: -61 (No data available)" >&2; exit 1; fi
for ((i = 0; i < STUB_EFA; i++)); do
  for copy in 1 2; do  # fi_info may list a domain more than once
    printf 'provider: efa\n    fabric: efa\n    domain: rdmap%ds27-rdm\n    type: FI_EP_RDM\n' "$i"
  done
done
""",
    "gpufleet": r"""
echo "gpufleet $*" >> "$STUB_LOG"
case "$1" in
  nccl-report) echo "report $*"; exit "$STUB_REPORT_EXIT" ;;
  *) echo "unexpected gpufleet $*" >&2; exit 9 ;;
esac
""",
    "mpirun": r"""
echo "mpirun $*" >> "$STUB_LOG"
# A command run once per host (-n HOSTS -N 1 ... nvidia-smi ...): each host's lines as --tag-output tags them.
for ((at = 1; at <= $#; at++)); do [[ "${!at}" == nvidia-smi ]] && break; done
if ((at <= $#)); then
  for ((rank = 0; rank < $(sed -E 's/.* -n ([0-9]+) .*/\1/' <<< " $* "); rank++)); do
    STUB_HOST_INDEX=$rank "${@:at}" | sed "s/^/[1,$rank]<stdout>:/"
  done
  exit 0
fi
{ env | grep -E '^(FI|NCCL)_|^LD_LIBRARY_PATH=' || true; } | sort > "$STUB_DIR/mpirun-env"  # none: empty
if [[ -n "${STUB_NCCL_OUTPUT:-}" ]]; then cat "$STUB_NCCL_OUTPUT"; else echo "#  Avg bus bandwidth    : 71.5"; fi
exit "$STUB_MPIRUN_EXIT"
""",
}

TOPOLOGY_CAPTURES = Path(__file__).parents[2] / "fixtures" / "topo"

HEALTHY = {
    "STUB_GPUS": "8",
    "STUB_DRIVER": "450.80.02",
    "STUB_ECC": "0 0 0 0 0 0 0 0",
    "STUB_REMAP": "\n".join(["0:0:No:No"] * 8),
    "STUB_FM_STATE": "active",
    "STUB_EFA": "4",
    "STUB_TOPO": str(TOPOLOGY_CAPTURES / "p4d.txt"),
    "STUB_REPORT_EXIT": "0",
    "STUB_MPIRUN_EXIT": "0",
}


@pytest.fixture
def stub_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, body in STUBS.items():
        path = directory / name
        path.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory


@pytest.fixture
def run_script(stub_dir: Path, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs scripts/ops/NAME with the stubs first on PATH, a healthy node by default, and ENV on top."""

    def run(name: str, **env: str) -> subprocess.CompletedProcess[str]:
        script = Path(__file__).parents[3] / "scripts" / "ops" / name
        environment = {
            "PATH": f"{stub_dir}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "STUB_LOG": str(tmp_path / "calls.log"),
            "STUB_DIR": str(tmp_path),
            "GPUFLEET_ROOT": str(tmp_path / "root"),
            **HEALTHY,
            **env,
        }
        return subprocess.run(
            [str(script)], env=environment, capture_output=True, text=True, timeout=30, cwd=tmp_path, check=False
        )

    return run


@pytest.fixture
def calls(tmp_path: Path) -> Callable[[], list[str]]:
    def read() -> list[str]:
        log = tmp_path / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    return read
