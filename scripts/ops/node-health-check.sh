#!/usr/bin/env bash
# Health of one GPU node before it joins a job: GPU count, driver version against the image's versions manifest,
# Fabric Manager on NVSwitch types, EFA devices, uncorrectable ECC errors and the GPU/NIC topology.
# Prints one PASS/FAIL line per check and exits 1 when any check fails (every check runs either way).
#
# Required: GPUFLEET_EXPECTED_GPUS (e.g. 8), GPUFLEET_EXPECTED_EFA (EFA devices, 0 to skip the check),
#           GPUFLEET_NVSWITCH (1 | 0), GPUFLEET_INSTANCE_TYPE (e.g. p4d.24xlarge, for `gpufleet topo-check`).
# Optional: GPUFLEET_ROOT (prefix of /etc/gpufleet/versions.json, for tests), GPUFLEET_CLI (default `gpufleet`;
#           may hold several words, e.g. `python3 -m gpufleet`).
set -euo pipefail

die() { echo "node-health-check: $*" >&2; exit 2; }

for variable in GPUFLEET_EXPECTED_GPUS GPUFLEET_EXPECTED_EFA GPUFLEET_NVSWITCH GPUFLEET_INSTANCE_TYPE; do
  [[ -n "${!variable:-}" ]] || die "$variable is not set (see the header of $0)"
done
[[ "$GPUFLEET_EXPECTED_GPUS" =~ ^[0-9]+$ ]] || die "GPUFLEET_EXPECTED_GPUS must be a number, got '$GPUFLEET_EXPECTED_GPUS'"
[[ "$GPUFLEET_EXPECTED_EFA" =~ ^[0-9]+$ ]] || die "GPUFLEET_EXPECTED_EFA must be a number, got '$GPUFLEET_EXPECTED_EFA'"
[[ "$GPUFLEET_NVSWITCH" =~ ^[01]$ ]] || die "GPUFLEET_NVSWITCH must be 1 or 0, got '$GPUFLEET_NVSWITCH'"
read -r -a gpufleet_cli <<< "${GPUFLEET_CLI:-gpufleet}"
manifest="${GPUFLEET_ROOT:-}/etc/gpufleet/versions.json"

failures=0
report() {  # report NAME STATUS(0 = pass) MESSAGE
  if [[ "$2" -eq 0 ]]; then
    echo "PASS $1: $3"
  else
    echo "FAIL $1: $3"
    failures=$((failures + 1))
  fi
}

check_gpu_count() {
  local count
  if ! count=$(nvidia-smi -L 2>&1 | grep -c '^GPU '); then
    count=0
  fi
  local status=0
  [[ "$count" -eq "$GPUFLEET_EXPECTED_GPUS" ]] || status=1
  report gpu-count "$status" "$count GPUs visible (expected $GPUFLEET_EXPECTED_GPUS)"
}

check_driver() {
  local expected actual
  if [[ ! -r "$manifest" ]]; then
    report driver 1 "$manifest not found: was this node built from a gpufleet image?"
    return
  fi
  expected=$(jq -r '.components.driver // empty' "$manifest")
  if [[ -z "$expected" ]]; then
    report driver 1 "$manifest has no components.driver"
    return
  fi
  if ! actual=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | sort -u | paste -sd, -); then
    actual="unknown"
  fi
  local status=0
  [[ "$actual" == "$expected" ]] || status=1
  report driver "$status" "driver $actual (image manifest: $expected)"
}

check_fabric_manager() {
  if [[ "$GPUFLEET_NVSWITCH" != 1 ]]; then
    report fabric-manager 0 "not needed (no NVSwitch)"
    return
  fi
  local state status=0
  state=$(systemctl is-active nvidia-fabricmanager 2>/dev/null) || true
  [[ "$state" == active ]] || status=1
  report fabric-manager "$status" "nvidia-fabricmanager is ${state:-unknown} (NVSwitch needs it active, or CUDA fails with error 802)"
}

check_efa() {
  if [[ "$GPUFLEET_EXPECTED_EFA" -eq 0 ]]; then
    report efa 0 "not expected (GPUFLEET_EXPECTED_EFA=0)"
    return
  fi
  local listing count
  if ! listing=$(fi_info -p efa -t FI_EP_RDM 2>&1); then
    report efa 1 "fi_info -p efa found no EFA provider ($(head -n 1 <<< "$listing"))"
    return
  fi
  # One RDM domain per EFA device (rdmap16s27-rdm, ...); a device may be listed more than once.
  count=$(awk '$1 == "domain:" {print $2}' <<< "$listing" | sort -u | grep -c . || true)
  local status=0
  [[ "$count" -eq "$GPUFLEET_EXPECTED_EFA" ]] || status=1
  report efa "$status" "$count EFA devices (expected $GPUFLEET_EXPECTED_EFA)"
}

check_ecc() {
  local output index=0 bad=() value
  if ! output=$(nvidia-smi --query-gpu=ecc.errors.uncorrected.volatile.total --format=csv,noheader 2>&1); then
    report ecc 1 "nvidia-smi could not read ECC counters: $(head -n 1 <<< "$output")"
    return
  fi
  while read -r value; do
    if [[ "$value" =~ ^[0-9]+$ && "$value" -gt 0 ]]; then
      bad+=("GPU $index: $value")
    fi
    index=$((index + 1))
  done <<< "$output"
  if [[ ${#bad[@]} -eq 0 ]]; then
    report ecc 0 "no uncorrectable volatile ECC errors on $index GPUs"
  else
    report ecc 1 "uncorrectable ECC errors (${bad[*]}): drain the node and replace it"
  fi
}

check_topology() {
  local topology verdict status=0
  if ! topology=$(nvidia-smi topo -m 2>&1); then
    report topology 1 "nvidia-smi topo -m failed: $(head -n 1 <<< "$topology")"
    return
  fi
  verdict=$("${gpufleet_cli[@]}" topo-check --instance-type "$GPUFLEET_INSTANCE_TYPE" <<< "$topology" 2>&1) || status=$?
  report topology "$status" "topo-check $GPUFLEET_INSTANCE_TYPE: $(head -n 1 <<< "$verdict")"
}

check_gpu_count
check_driver
check_fabric_manager
check_efa
check_ecc
check_topology

if [[ "$failures" -gt 0 ]]; then
  echo "node unhealthy: $failures check(s) failed"
  exit 1
fi
echo "node healthy"
