"""Stub commands (nvidia-smi, systemctl, fi_info, mpirun, gpufleet) on PATH for the node scripts.

Each stub's behaviour comes from STUB_* environment variables, and each call is appended to $STUB_LOG, so a test
can both steer and inspect what a script ran.
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

STUBS = {
    "nvidia-smi": r"""
echo "nvidia-smi $*" >> "$STUB_LOG"
case "$*" in
  -L) for ((i = 0; i < STUB_GPUS; i++)); do echo "GPU $i: NVIDIA A100-SXM4-40GB (UUID: GPU-$i)"; done ;;
  --query-gpu=driver_version*) for ((i = 0; i < STUB_GPUS; i++)); do echo "$STUB_DRIVER"; done ;;
  --query-gpu=ecc.errors.uncorrected.volatile.total*) printf '%s\n' $STUB_ECC ;;
  "topo -m") echo "GPU0 X NV12" ;;
  *) echo "unexpected nvidia-smi $*" >&2; exit 9 ;;
esac
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
  topo-check) cat > "$STUB_DIR/topo-input"; echo "topology ok: $*"; exit "$STUB_TOPO_EXIT" ;;
  nccl-report) echo "report $*"; exit "$STUB_REPORT_EXIT" ;;
  *) echo "unexpected gpufleet $*" >&2; exit 9 ;;
esac
""",
    "mpirun": r"""
echo "mpirun $*" >> "$STUB_LOG"
{ env | grep -E '^(FI|NCCL)_|^LD_LIBRARY_PATH=' || true; } | sort > "$STUB_DIR/mpirun-env"  # none: empty
echo "#  Avg bus bandwidth    : 71.5"
exit "$STUB_MPIRUN_EXIT"
""",
}

HEALTHY = {
    "STUB_GPUS": "8",
    "STUB_DRIVER": "450.80.02",
    "STUB_ECC": "0 0 0 0 0 0 0 0",
    "STUB_FM_STATE": "active",
    "STUB_EFA": "4",
    "STUB_TOPO_EXIT": "0",
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
