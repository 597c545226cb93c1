#!/usr/bin/env bash
# Health of one GPU node before it joins a job: the image's profile and driver version against its versions
# manifest (/etc/gpufleet/versions.json, written by the image build's scripts/ami/17-validate.sh), Fabric Manager on NVSwitch types, EFA devices, GPU health and the GPU/NIC topology.
# Prints one PASS/FAIL line per check (every check runs either way). gpu-health follows it with one line per GPU:
#   ok       nothing to do
#   reset    a row remap is pending, uncorrectable ECC errors since the driver loaded, or an Xid whose NVIDIA action
#            is a GPU reset or node restart since boot: reboot the node (that resets every GPU and clears the
#            kernel log), then run this check again
#   replace  row remapping failed (remapped_rows.failure=Yes): NVIDIA's RMA criterion; replace the instance
# Exit status: 0 healthy; 1 a check failed (a GPU to replace among them); 2 a setting is missing or malformed;
#              3 only GPU resets are needed (the one failing check is gpu-health and no GPU is to replace).
# Reads the kernel log with dmesg: run as root where kernel.dmesg_restrict is 1.
#
# Needs neither gpufleet nor AWS credentials: bash, jq, awk and the NVIDIA/EFA tools of the image. The user data
# installs it on every node as /opt/gpufleet/ops/node-health-check.sh, and its settings in /etc/gpufleet/node.env
# (`. /etc/gpufleet/node.env` exports them), written from the catalog entry of the environment's instance type:
# Required: GPUFLEET_GPU_COUNT (e.g. 8), GPUFLEET_EFA_COUNT (EFA devices, 0 to skip the check), GPUFLEET_NVSWITCH
#           (1 | 0), GPUFLEET_GPUDIRECT_RDMA (1: the topology shows one NIC per EFA device), GPUFLEET_INSTANCE_TYPE.
# Optional: GPUFLEET_AMI_PROFILE (the profile the environment's image comes from; empty: image-profile is not
#           checked), GPUFLEET_DEEP_LEARNING_AMI (the image is that AWS Deep Learning AMI, which has no versions
#           manifest: the driver check reports the versions the node shows), GPUFLEET_ROOT (prefix of
#           /etc/gpufleet/versions.json, for tests).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
# Exit statuses 1 and 3 are verdicts on the node; a setting missing or malformed is 2.
ERROR_STATUS=2

# fi_info is in the EFA installer's bin directory, which only login shells have on PATH (its
# /etc/profile.d/zippy_efa.sh); node-ready.sh runs this check from a systemd unit. Appended, so a stub in tests wins.
PATH="$PATH:${GPUFLEET_ROOT:-}/opt/amazon/efa/bin"

require_settings "see the header of scripts/ops/node-health-check.sh" \
  GPUFLEET_GPU_COUNT GPUFLEET_EFA_COUNT GPUFLEET_NVSWITCH GPUFLEET_GPUDIRECT_RDMA GPUFLEET_INSTANCE_TYPE
[[ "$GPUFLEET_GPU_COUNT" =~ ^[0-9]+$ ]] || die "GPUFLEET_GPU_COUNT must be a number, got '$GPUFLEET_GPU_COUNT'"
[[ "$GPUFLEET_EFA_COUNT" =~ ^[0-9]+$ ]] || die "GPUFLEET_EFA_COUNT must be a number, got '$GPUFLEET_EFA_COUNT'"
[[ "$GPUFLEET_NVSWITCH" =~ ^[01]$ ]] || die "GPUFLEET_NVSWITCH must be 1 or 0, got '$GPUFLEET_NVSWITCH'"
[[ "$GPUFLEET_GPUDIRECT_RDMA" =~ ^[01]$ ]] ||
  die "GPUFLEET_GPUDIRECT_RDMA must be 1 or 0, got '$GPUFLEET_GPUDIRECT_RDMA'"
manifest="${GPUFLEET_ROOT:-}/etc/gpufleet/versions.json"
# What scripts/node/deep-learning-ami.sh read from a Deep Learning AMI at boot, in the manifest's form.
DEEP_LEARNING_AMI_VERSIONS="${GPUFLEET_ROOT:-}/etc/gpufleet/deep-learning-ami.json"
# scripts/ami/17-validate.sh writes about 1 KB; a larger file is not one it wrote, and is not read.
MANIFEST_MAX_BYTES=65536

failures=0
report() {  # report NAME STATUS(0 = pass) MESSAGE
  if [[ "$2" -eq 0 ]]; then
    echo "PASS $1: $3"
  else
    echo "FAIL $1: $3"
    failures=$((failures + 1))
  fi
}

# manifest_value FILTER [FILE]: the string the jq FILTER (.profile) selects in the versions manifest (or FILE, which
# has its form), on one line (control characters as ?), empty where there is none. When the file is not one JSON
# object of at most MANIFEST_MAX_BYTES, prints one line saying why and returns 1.
manifest_value() {
  local value size file=${2:-$manifest}
  size=$(stat -c %s -- "$file" 2>/dev/null) || size=0  # gone: jq says so below
  if ((size > MANIFEST_MAX_BYTES)); then
    echo "$file is $size bytes, more than a versions manifest ($MANIFEST_MAX_BYTES at most): not read"
    return 1
  fi
  if ! value=$(jq -r --slurp 'if length == 1 and (.[0] | type) == "object"
      then .[0] | ((try ('"$1"') catch null) | strings | gsub("[[:cntrl:]]"; "?")) // ""
      else error("expected one JSON object") end' "$file" 2>&1); then
    echo "$file is not a versions manifest ($(head -n 1 <<< "$value"))"
    return 1
  fi
  echo "$value"
}

check_gpu_count() {
  local count
  if ! count=$(nvidia-smi -L 2>&1 | grep -c '^GPU '); then
    count=0
  fi
  local status=0
  [[ "$count" -eq "$GPUFLEET_GPU_COUNT" ]] || status=1
  report gpu-count "$status" "$count GPUs visible (expected $GPUFLEET_GPU_COUNT)"
}

check_image_profile() {
  local actual
  if [[ -z "${GPUFLEET_AMI_PROFILE:-}" ]]; then
    report image-profile 0 "not checked (GPUFLEET_AMI_PROFILE is empty: the environment names no AMI pipeline profile)"
    return
  fi
  if [[ ! -r "$manifest" ]]; then
    report image-profile 1 "$manifest not found: was this node built from a gpufleet image?"
    return
  fi
  if ! actual=$(manifest_value .profile); then
    report image-profile 1 "$actual"
    return
  fi
  local status=0
  [[ "$actual" == "$GPUFLEET_AMI_PROFILE" ]] || status=1
  report image-profile "$status" "image built from profile ${actual:-unknown} (environment: $GPUFLEET_AMI_PROFILE)"
}

# A Deep Learning AMI (GPUFLEET_DEEP_LEARNING_AMI) carries no versions manifest to compare the driver with: the check
# reports the driver the GPUs show (one version on every GPU, or it fails) and what deep-learning-ami.sh read from the
# image at boot (DEEP_LEARNING_AMI_VERSIONS: the aws-ofi-nccl release and the EFA installer's version).
check_deep_learning_ami_driver() {
  local actual status=0 plugin installer read_at_boot
  if ! actual=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | sort -u | paste -sd, -); then
    actual="unknown"
  fi
  [[ "$actual" =~ ^[0-9][0-9.]*$ ]] || status=1
  if plugin=$(manifest_value .components.aws_ofi_nccl "$DEEP_LEARNING_AMI_VERSIONS") &&
    installer=$(manifest_value .components.efa_installer "$DEEP_LEARNING_AMI_VERSIONS"); then
    read_at_boot="aws-ofi-nccl ${plugin:-none}, EFA installer ${installer:-unknown}"
  else
    read_at_boot=$plugin
  fi
  report driver "$status" \
    "driver $actual on Deep Learning AMI $GPUFLEET_DEEP_LEARNING_AMI (no versions manifest to compare with; $read_at_boot)"
}

check_driver() {
  local expected actual
  if [[ ! -r "$manifest" && -n "${GPUFLEET_DEEP_LEARNING_AMI:-}" ]]; then
    check_deep_learning_ami_driver
    return
  fi
  if [[ ! -r "$manifest" ]]; then
    report driver 1 "$manifest not found: was this node built from a gpufleet image?"
    return
  fi
  if ! expected=$(manifest_value .components.driver); then
    report driver 1 "$expected"
    return
  fi
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
  if [[ "$GPUFLEET_EFA_COUNT" -eq 0 ]]; then
    report efa 0 "not expected (GPUFLEET_EFA_COUNT=0)"
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
  [[ "$count" -eq "$GPUFLEET_EFA_COUNT" ]] || status=1
  report efa "$status" "$count EFA devices (expected $GPUFLEET_EFA_COUNT)"
}

# --- GPU health: one verdict per GPU (ok | reset | replace) -----------------------------------------------------
# Sources for what follows:
# - row remapping (A100/H100 and later): NVIDIA "GPU Memory Error Management",
#   https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/ -- "Row Remapping": up to 512 remappings, applied only by
#   a GPU reset; "Error Recovery and Response Flags": the pending flag means the remap happens at the next GPU reset;
#   "RMA Policy": the failure flag is set by an uncorrectable-error remap on a bank that already has 8 such rows, on a
#   row already remapped, or after 512 uncorrectable remaps, and meets the RMA criterion (confirmed by NVIDIA's field
#   diagnostic). Field names: nvidia-smi --help-query-remapped-rows (remapped_rows.pending/.failure print Yes/No).
# - ECC: ecc.errors.uncorrected.volatile.total counts since the driver loaded; the pending remap (or, before Ampere,
#   page retirement) it causes is applied by a GPU reset or reboot.
# - Xids: the kernel log line `NVRM: Xid (PCI:0000:10:1c): 79, pid=..., GPU has fallen off the bus.` (driver
#   os-interface; samples in stas00/ml-engineering compute/accelerator/nvidia/debug.md and
#   NVIDIA/open-gpu-kernel-modules issues 461, 1151). Numbers and mnemonics: open-gpu-kernel-modules
#   src/common/sdk/nvidia/inc/nverror.h; immediate actions: the "Resolution Bucket (Immediate Action)" column of
#   NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) as NVIDIA/NVSentinel
#   distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv carries it.
# An Xid listed here gets the verdict reset: NVIDIA's immediate action is a GPU reset (RESET_GPU), a node restart
# (RESTART_BM) or a workflow that starts with a reset (WORKFLOW_*). Other Xids (13, 31, 43, 45, 63, 92, 94: RESTART_APP
# or IGNORE in the catalog) are listed but judge nothing. The kernel ring buffer starts at boot, so a reboot clears them.
declare -A XID_ACTIONS=(
  [46]="ROBUST_CHANNEL_GPU_TIMEOUT_ERROR: RESET_GPU"
  [48]="ROBUST_CHANNEL_GPU_ECC_DBE (double-bit ECC error): WORKFLOW_XID_48"
  [62]="PMU_HALT_ERROR: RESET_GPU"
  [64]="INFOROM_DRAM_RETIREMENT_FAILURE (row remap not recorded): RESET_GPU"
  [74]="NVLINK_ERROR: WORKFLOW_NVLINK_ERR"
  [79]="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: RESTART_BM"
  [95]="ROBUST_CHANNEL_UNCONTAINED_ERROR (uncontained ECC error): RESET_GPU"
  [109]="ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR: RESET_GPU"
  [110]="SEC_FAULT_ERROR: RESET_GPU"
  [119]="GSP_RPC_TIMEOUT: RESET_GPU"
  [120]="GSP_ERROR: RESET_GPU"
  [136]="ALI_TRAINING_FAIL: RESET_GPU"
  [140]="UNRECOVERABLE_ECC_ERROR_ESCAPE: RESET_GPU"
  [143]="GPU_INIT_ERROR: RESET_GPU"
  [144]="NVLINK_SAW_ERROR: WORKFLOW_NVLINK5_ERR"
  [145]="NVLINK_RLW_ERROR: WORKFLOW_NVLINK5_ERR"
  [146]="NVLINK_TLW_ERROR: WORKFLOW_NVLINK5_ERR"
  [147]="NVLINK_TREX_ERROR: WORKFLOW_NVLINK5_ERR"
  [148]="NVLINK_NVLPW_CTRL_ERROR: WORKFLOW_NVLINK5_ERR"
  [149]="NVLINK_NETIR_ERROR: WORKFLOW_NVLINK5_ERR"
  [150]="NVLINK_MSE_ERROR: WORKFLOW_NVLINK5_ERR"
  [155]="NVLINK_SW_DEFINED_ERROR: RESET_GPU"
  [156]="RESOURCE_RETIREMENT_EVENT: RESET_GPU"
  [158]="GPU_FATAL_TIMEOUT: RESET_GPU"
  [160]="CHANNEL_RETIREMENT_EVENT: RESTART_BM"
)
# "(PCI:0000:10:1c)", "(PCI:0000:01:00 GPU-I:05)" under MIG, "(0000:01:00)" from old drivers: \2 is the address with
# the domain's last four digits (the key pci_key makes from nvidia-smi's 00000000:10:1C.0), \3 the Xid.
XID_LINE='.*NVRM: Xid \((PCI:)?[0-9a-fA-F]*([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): ([0-9]+),.*'
REMAP_FIELDS=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure

declare -A gpu_verdict=() gpu_notes=()
gpu_order=()
unreadable=()
remapping_unreported=""
gpu_reset_needed=0

pci_key() {  # nvidia-smi's 00000000:10:1C.0 and the kernel log's 0000:10:1c both become 0000:10:1c
  local address=${1,,}
  address=${address%.*}
  echo "${address: -10}"
}

verdict_rank() { case "$1" in ok) echo 0 ;; reset) echo 1 ;; replace) echo 2 ;; esac; }

judge() {  # judge PCI_KEY VERDICT [NOTE]: keeps the worst verdict of a GPU and all its notes
  local key=$1 verdict=$2 note=${3:-}
  if [[ -z "${gpu_verdict[$key]:-}" ]]; then
    gpu_order+=("$key")
    gpu_verdict[$key]=$verdict
  elif (( $(verdict_rank "$verdict") > $(verdict_rank "${gpu_verdict[$key]}") )); then
    gpu_verdict[$key]=$verdict
  fi
  [[ -z "$note" ]] || gpu_notes[$key]+="${gpu_notes[$key]:+; }$note"
}

read_ecc_counters() {
  local output bus count
  if ! output=$(nvidia-smi --query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader 2>&1); then
    unreadable+=("nvidia-smi could not read ECC counters: $(head -n 1 <<< "$output")")
    return
  fi
  while IFS=, read -r bus count; do  # "00000000:10:1C.0, 0": values after the first start with a space
    [[ -n "$bus" ]] || continue
    count=${count# }
    if [[ "$count" =~ ^[0-9]+$ && "$count" -gt 0 ]]; then  # [N/A] when ECC is off or unsupported
      judge "$(pci_key "$bus")" reset "$count uncorrectable ECC error(s) since the driver loaded"
    else
      judge "$(pci_key "$bus")" ok
    fi
  done <<< "$output"
}

read_row_remapping() {
  local output status=0 bus correctable uncorrectable pending failure key
  output=$(nvidia-smi --query-remapped-rows="$REMAP_FIELDS" --format=csv,noheader 2>&1) || status=$?
  # GPUs without row remapping (V100, T4) and drivers that predate it say so instead of printing rows.
  if [[ "$output" == *"No devices were found"* || "$output" == *"is not a valid field to query"* ]]; then
    remapping_unreported="row remapping not reported: $(head -n 1 <<< "$output")"
    return
  fi
  if [[ "$status" -ne 0 ]]; then
    unreadable+=("nvidia-smi could not read row remapping: $(head -n 1 <<< "$output")")
    return
  fi
  while IFS=, read -r bus correctable uncorrectable pending failure; do
    [[ -n "$bus" ]] || continue
    correctable=${correctable# } uncorrectable=${uncorrectable# } pending=${pending# } failure=${failure# }
    key=$(pci_key "$bus")
    if [[ "$failure" == Yes ]]; then
      judge "$key" replace "row remapping failed (remapped_rows.failure=Yes): NVIDIA's RMA criterion"
    elif [[ "$pending" == Yes ]]; then
      judge "$key" reset "row remap pending (remapped_rows.pending=Yes): applied at the next GPU reset"
    elif [[ "$pending" == No && "$failure" == No ]]; then
      judge "$key" ok
      if [[ "$correctable" =~ ^[1-9] || "$uncorrectable" =~ ^[1-9] ]]; then
        judge "$key" ok "rows remapped: $correctable correctable, $uncorrectable uncorrectable"
      fi
    elif [[ "$pending" == "$failure" && ("$pending" == "[N/A]" || "$pending" == "[Not Supported]") ]]; then
      # [Not Supported]: NVML does not report remapped rows "on MIG-enabled GPUs with active instances" (NVML API
      # reference, nvmlDeviceGetRemappedRows); such GPUs are judged on ECC and Xids alone, like those without remapping.
      remapping_unreported="row remapping not reported: $pending"
    else
      unreadable+=("GPU $key: unexpected row remapping values '$pending', '$failure'")
    fi
  done <<< "$output"
}

read_xids() {
  local log times key code
  if ! log=$(dmesg 2>&1); then
    unreadable+=("dmesg could not read the kernel log: $(head -n 1 <<< "$log")")
    return
  fi
  while read -r times key code; do
    if [[ -n "${XID_ACTIONS[$code]:-}" ]]; then
      judge "$key" reset "Xid $code x$times since boot (${XID_ACTIONS[$code]})"
    else
      judge "$key" ok "Xid $code x$times since boot (not a node fault in NVIDIA's catalog)"
    fi
  done < <(sed -nE "s/$XID_LINE/\2 \3/p" <<< "$log" | tr 'A-F' 'a-f' | sort | uniq -c)
}

check_gpu_health() {
  read_ecc_counters
  read_row_remapping
  read_xids
  local key replace=0 reset=0 line details=()
  # ${a[@]+"${a[@]}"}: an empty array is "unbound" under set -u in bash < 4.4 (Amazon Linux 2 ships bash 4.2).
  for key in ${gpu_order[@]+"${gpu_order[@]}"}; do
    case "${gpu_verdict[$key]}" in replace) replace=$((replace + 1)) ;; reset) reset=$((reset + 1)) ;; esac
    details+=("  GPU $key: ${gpu_verdict[$key]}${gpu_notes[$key]:+: ${gpu_notes[$key]}}")
  done
  if [[ ${#unreadable[@]} -gt 0 ]]; then
    report gpu-health 1 "could not judge the GPUs: $(IFS=';'; echo "${unreadable[*]}") (verdicts below are partial)"
  elif [[ "$replace" -gt 0 ]]; then
    report gpu-health 1 "$replace GPU(s) to replace (drain the node and replace the instance), $reset to reset"
  elif [[ "$reset" -gt 0 ]]; then
    report gpu-health 1 "$reset GPU(s) need a reset: reboot the node, then run this check again"
    gpu_reset_needed=1
  else
    report gpu-health 0 "${#gpu_order[@]} GPUs ok${remapping_unreported:+; $remapping_unreported}"
  fi
  for line in ${details[@]+"${details[@]}"}; do echo "$line"; done
}

# The rules of `gpufleet topo-check` (gpufleet/reports/topology.py check_topology), in awk so the node needs no
# gpufleet: the matrix's GPU count, each pair's link the same both ways, on NVSwitch types an NVLink (NV#) on every
# pair and none with fewer links than most pairs, with GPUDirect RDMA one NIC column per EFA device. The header is
# the line whose first cell is GPU0 (device columns until "CPU Affinity"); cells are tab-separated as nvidia-smi
# writes them (runs of spaces in a terminal copy). Prints one line; exits 1 on problems, 2 on a matrix cut short.
# shellcheck disable=SC2016 # an awk program: its $ are awk's
TOPOLOGY_AWK='
function cells(line, out,   raw, n, i, m) {
  if (index(line, "\t") == 0) return split(line, out, " ")
  n = split(line, raw, "\t"); m = 0
  for (i = 1; i <= n; i++) { gsub(/^ +| +$/, "", raw[i]); if (raw[i] != "" || m > 0) out[++m] = raw[i] }
  return m
}
!header { n = cells($0, c); if (c[1] != "GPU0") next
  for (i = 1; i <= n && c[i] !~ /^CPU/; i++) { m = split(c[i], parts, " "); for (p = 1; p <= m; p++) dev[++devices] = parts[p] }
  for (i = 1; i <= devices; i++) { index_of[dev[i]] = i; if (dev[i] ~ /^GPU[0-9]+$/) gpus++ }
  header = 1; next }
{ n = cells($0, c); d = index_of[c[1]]; if (!d || (d in row)) next
  for (j = 1; j <= devices; j++) {
    if (c[j + 1] !~ /^(X|SYS|SOC|NODE|PHB|PXB|PIX|PSB|NV[0-9]+)$/) { print "row " c[1] " is cut short"; bad = 2; exit 2 }
    link[d, j] = c[j + 1] }
  row[d] = 1 }
END { if (bad) exit 2
  if (!header) { print "no nvidia-smi topo -m header row (GPU0 GPU1 ...)"; exit 2 }
  for (i = 1; i <= devices; i++) if (!(i in row)) { print "no row for " dev[i] " (cut short?)"; exit 2 }
  if (gpus != want_gpus) problem(gpus " GPUs in the matrix, expected " want_gpus)
  for (i = 1; i <= gpus; i++) for (j = i + 1; j <= gpus; j++) {
    pair = dev[i] "-" dev[j]; l = link[i, j]
    if (l != link[j, i]) problem(pair ": " l " one way, " link[j, i] " the other")
    if (l ~ /^NV/) { nv[pair] = substr(l, 3) + 0; seen[nv[pair]]++; pairs++ }
    else if (nvswitch) problem(pair ": " l ", expected an NVLink (NV#) on an NVSwitch type") }
  for (k in seen) if (seen[k] > seen[usual] || usual == "") usual = k
  if (nvswitch) for (pair in nv) if (nv[pair] < usual + 0) problem(pair ": NV" nv[pair] ", fewer NVLinks than the other pairs (NV" usual ")")
  if (want_nics >= 0 && devices - gpus != want_nics) problem(devices - gpus " NICs in the matrix, expected " want_nics " (one per EFA device)")
  if (problems) { print problems; exit 1 }
  print gpus " GPUs, " pairs + 0 " NVLink pairs, " devices - gpus " NICs" }
function problem(text) { problems = problems (problems ? "; " : "") text }
'

check_topology() {
  local topology verdict status=0 nics=-1
  if ! topology=$(nvidia-smi topo -m 2>&1); then
    report topology 1 "nvidia-smi topo -m failed: $(head -n 1 <<< "$topology")"
    return
  fi
  [[ "$GPUFLEET_GPUDIRECT_RDMA" != 1 ]] || nics=$GPUFLEET_EFA_COUNT
  # ANSI colour codes out first, as topo-check does (whether nvidia-smi writes them to a pipe is unconfirmed).
  # shellcheck disable=SC2001 # a regular expression, which ${var//} does not take
  verdict=$(sed 's/\x1b\[[0-9;]*[A-Za-z]//g' <<< "$topology" | awk -v want_gpus="$GPUFLEET_GPU_COUNT" \
    -v nvswitch="$GPUFLEET_NVSWITCH" -v want_nics="$nics" "$TOPOLOGY_AWK" 2>&1) || status=$?
  report topology "$status" "$GPUFLEET_INSTANCE_TYPE: $verdict"
}

check_gpu_count
check_image_profile
check_driver
check_fabric_manager
check_efa
check_gpu_health
check_topology

if [[ "$failures" -eq 1 && "$gpu_reset_needed" -eq 1 ]]; then
  echo "node unhealthy: GPU reset needed (reboot the node)"
  exit 3
fi
if [[ "$failures" -gt 0 ]]; then
  echo "node unhealthy: $failures check(s) failed"
  exit 1
fi
echo "node healthy"
