#!/usr/bin/env bash
# Multi-node nccl-tests over EFA: mpirun across the hosts of a hostfile (`gpufleet hosts ENV --format mpi`),
# output teed to a log, then judged (this script's exit status): by `gpufleet nccl-report LOG --min-busbw X` where
# gpufleet is installed, else, as on a node (whose Python may be older than gpufleet needs), by the awk below on
# the same rules for one table: no wrong elements, the run not cut short, the peak busbw at least the floor.
# Every node has it as /opt/gpufleet/ops/run-nccl-tests.sh (scripts/node/operator-scripts.sh installs it at boot);
# `. /etc/gpufleet/node.env` sets the instance type and the floor.
#
# Required: GPUFLEET_HOSTFILE (lines "IP slots=GPUS"; GPUs per node and node count come from it),
#           GPUFLEET_INSTANCE_TYPE (e.g. p4d.24xlarge), GPUFLEET_MIN_BUSBW (GB/s floor; node.env has the catalog's
#           nccl_allreduce_busbw_gbs less 10%, empty for a type the catalog publishes none for).
# Optional: GPUFLEET_NCCL_TEST (default all_reduce_perf), GPUFLEET_NCCL_TESTS_DIR (default
#           /opt/nccl-tests/build), GPUFLEET_NCCL_LOG (default nccl-TEST-TIMESTAMP.log in the current directory),
#           GPUFLEET_ROOT (prefix of /etc/profile.d/gpufleet-efa.sh and /opt/amazon/openmpi, for tests),
#           GPUFLEET_CLI (default gpufleet).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
# A run refused before it starts exits 2, apart from the exit statuses of mpirun's failures (1) and nccl-report.
ERROR_STATUS=2

require_settings "see the header of scripts/ops/run-nccl-tests.sh" GPUFLEET_HOSTFILE GPUFLEET_INSTANCE_TYPE
hostfile=$GPUFLEET_HOSTFILE
[[ -r "$hostfile" ]] || die "hostfile $hostfile not found: make it with \`gpufleet hosts ENV --format mpi > $hostfile\`"
test_name=${GPUFLEET_NCCL_TEST:-all_reduce_perf}
binary=${GPUFLEET_NCCL_TESTS_DIR:-/opt/nccl-tests/build}/$test_name
log=${GPUFLEET_NCCL_LOG:-nccl-$test_name-$(date -u +%Y%m%dT%H%M%SZ).log}
read -r -a gpufleet_cli <<< "${GPUFLEET_CLI:-gpufleet}"

mapfile -t slots < <(awk 'NF {for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) {sub("slots=", "", $i); print $i}}' "$hostfile")
nodes=$(awk 'NF' "$hostfile" | wc -l)
[[ "$nodes" -gt 0 ]] || die "hostfile $hostfile lists no hosts"
[[ "${#slots[@]}" -eq "$nodes" ]] || die "every line of $hostfile needs slots=GPUS (as gpufleet hosts writes it)"
gpus=${slots[0]}
for count in "${slots[@]}"; do
  [[ "$count" == "$gpus" ]] || die "hostfile $hostfile mixes slot counts ($gpus and $count): one instance type per run"
done

min_busbw=${GPUFLEET_MIN_BUSBW:-}
[[ -n "$min_busbw" ]] || die "no published bus bandwidth for $GPUFLEET_INSTANCE_TYPE in the catalog: set GPUFLEET_MIN_BUSBW"
[[ "$min_busbw" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "GPUFLEET_MIN_BUSBW must be a number of GB/s, got '$min_busbw'"

# The EFA variables and the library path (libfabric, Open MPI, aws-ofi-nccl) as efa-env.sh found them on this
# image: lib or lib64 by OS, the plugin where versions.json's paths.aws_ofi_nccl_lib says.
efa_environment="${GPUFLEET_ROOT:-}/etc/profile.d/gpufleet-efa.sh"
if [[ -r "$efa_environment" ]]; then
  # shellcheck source=/dev/null
  source "$efa_environment"
else
  warn "no $efa_environment (efa-env.sh writes it on EFA nodes): NCCL finds EFA and" \
    "the aws-ofi-nccl plugin only if LD_LIBRARY_PATH already has them"
fi
# Amazon's Open MPI (the EFA installer's, scripts/ami/07-efa-installer.sh), by its absolute path: "invoking mpirun via
# an absolute path name is equivalent to specifying the --prefix option with a <dir> value equivalent to the directory
# where mpirun resides, minus its last subdirectory" (Open MPI mpirun(1), SYNOPSIS; --prefix sets PATH and
# LD_LIBRARY_PATH on the remote node, "Remote Execution"), so the orted it starts on the other hosts over SSH is found
# where a non-login shell's PATH does not reach. An image without it uses the mpirun on PATH, by its absolute path too.
mpirun=${GPUFLEET_ROOT:-}/opt/amazon/openmpi/bin/mpirun
[[ -x $mpirun ]] || mpirun=$(command -v mpirun) ||
  die "no mpirun: neither Amazon's Open MPI (/opt/amazon/openmpi/bin) nor one on PATH"

forwarded=(-x PATH)
[[ -z "${LD_LIBRARY_PATH:-}" ]] || forwarded+=(-x LD_LIBRARY_PATH)
while read -r name; do
  forwarded+=(-x "$name")
done < <(compgen -e | grep -E '^(FI|NCCL)_' || true)

# "NCCL is currently not supported with MIG" (NVIDIA MIG user guide, Deployment Considerations,
# https://docs.nvidia.com/datacenter/tesla/mig-user-guide/deployment-considerations.html): refuse hosts with a GPU
# in MIG mode. One nvidia-smi per host through the same launcher, its lines tagged "[JOB,RANK]<stdout>:"; rank R runs
# on host R of the hostfile. mig.mode.current is Enabled, Disabled, or [N/A] on GPUs without MIG (nvidia-smi
# --help-query-gpu).
mapfile -t hosts < <(awk 'NF {print $1}' "$hostfile")
mig_modes=$("$mpirun" --hostfile "$hostfile" -n "$nodes" -N 1 --bind-to none --tag-output \
  nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>&1) || {
  printf '%s\n' "$mig_modes" >&2
  error "cannot read the MIG mode of the hosts of $hostfile (mpirun nvidia-smi failed, output above)"
  exit 1
}
mig_hosts=$(awk -v hosts="${hosts[*]}" 'BEGIN { split(hosts, host, " ") }
  /^\[[0-9]+,[0-9]+\]<stdout>: *Enabled *$/ {
    rank = $0; sub(/^\[[0-9]+,/, "", rank); sub(/\].*/, "", rank)
    if (!(rank in seen)) { seen[rank] = 1; print host[rank + 1] }
  }' <<< "$mig_modes" | paste -sd ' ')
[[ -z "$mig_hosts" ]] ||
  die "GPUs in MIG mode on $mig_hosts: NCCL is not supported with MIG (use nodes of an environment without node.mig_profile)"

log "$test_name on $nodes node(s) x $gpus GPU(s), floor $min_busbw GB/s, log $log" >&2
# MPI only starts the ranks: keep its own traffic on TCP (not the EFA devices NCCL uses) and leave pinning to NCCL.
status=0
"$mpirun" --hostfile "$hostfile" -n $((gpus * nodes)) -N "$gpus" \
  --bind-to none --mca pml '^cm,ucx' --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 \
  "${forwarded[@]}" \
  "$binary" -b 8 -e 16G -f 2 -g 1 2>&1 | tee "$log" || status=$?
[[ "$status" -eq 0 ]] || { error "mpirun failed (exit $status); log: $log"; exit 1; }

if command -v "${gpufleet_cli[0]}" >/dev/null; then
  exec "${gpufleet_cli[@]}" nccl-report "$log" --min-busbw "$min_busbw"
fi
# The table's columns by its header line (source: gpufleet/reports/nccl.py, which reads both layouts nccl-tests has
# printed): every busbw column counts for the peak, every #wrong column for wrong elements (the old layout's "error"
# is a deviation, not a count: its "Out of bounds values" line counts instead). A row is a line of as many fields
# as the header names, starting with a byte count. "Avg bus bandwidth" ends a finished run's table.
# shellcheck disable=SC2016 # an awk program: its $ are awk's
awk -v floor="$min_busbw" -v log_name="$log" '
/^#[ \t]+size[ \t]+count[ \t]+type/ { columns = NF - 1; for (i = 2; i <= NF; i++) name[i - 1] = $i; next }
columns && NF == columns && $1 ~ /^[0-9]+$/ {
  rows++
  for (i = 1; i <= columns; i++) {
    if (name[i] == "busbw" && $i + 0 > peak) { peak = $i + 0; at = $1 }
    if (name[i] == "#wrong" && $i ~ /^[0-9]+$/) wrong += $i
  } }
/^#[ \t]*Out of bounds values[ \t]*:/ { split($0, v, ":"); out_of_bounds += v[2] + 0 }
/^#[ \t]*Avg bus bandwidth/ { finished = 1 }
END {
  if (!rows) { print "run-nccl-tests: error: no nccl-tests table in " log_name > "/dev/stderr"; exit 2 }
  if (wrong) problem(wrong " wrong elements")
  else if (out_of_bounds) problem(out_of_bounds " out-of-bounds checks")
  if (!finished) problem("log cut short after " rows " rows (no Avg bus bandwidth line)")
  if (peak < floor + 0) problem("peak busbw " peak " GB/s is below the floor " floor " GB/s")
  print "run-nccl-tests: peak busbw " peak " GB/s at " at " bytes (floor " floor " GB/s): " (problems ? "FAIL: " problems : "OK")
  exit problems ? 1 : 0 }
function problem(text) { problems = problems (problems ? "; " : "") text }' "$log"
