#!/usr/bin/env bash
# Fails the build unless every component is installed at its pinned version (one line per failure), then
# records the stack in /etc/gpufleet/versions.json, which node scripts and operator tools read.
# Python, as the cluster user will meet it: `python3 -m venv` in a temporary directory and that virtualenv's pip
# must work (what a run's --setup 'python3 -m venv ...' does on a node), uv must be the pinned release, and with a
# profile pytorch option the virtualenv /opt/gpufleet/pytorch must hold the pinned torch, be root's and not writable
# by others; the manifest records it as paths.python_venv (null without one).
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

readonly COMPONENT_KEYS=(driver fabric_manager cuda cudnn nccl efa_installer aws_ofi_nccl nccl_tests fsx_lustre onednn
  container_toolkit aws_cli cloudwatch_agent)
required=(GPUFLEET_AMI_PROFILE GPUFLEET_OS_FAMILY GPUFLEET_OS_VERSION GPUFLEET_NVSWITCH GPUFLEET_UV_VERSION)
for key in "${COMPONENT_KEYS[@]}"; do required+=("GPUFLEET_${key^^}_VERSION"); done
# OS package names as ami/packages.yaml resolves them for the profile.
required+=(GPUFLEET_FSX_LUSTRE_PACKAGE GPUFLEET_CONTAINER_TOOLKIT_PACKAGE)
[[ "${GPUFLEET_NVSWITCH:-}" != 1 ]] || required+=(GPUFLEET_FABRIC_MANAGER_PACKAGE)
require_env "${required[@]}"
# Installed tools that are not on sudo's PATH; appended so an earlier entry (a test stub) wins.
PATH="$PATH:/opt/amazon/efa/bin:$CUDA_LINK/bin"

failures=0
fail() {
  printf '[gpufleet] FAIL %s\n' "$*" >&2
  failures=$((failures + 1))
}
pinned() { local name="GPUFLEET_${1^^}_VERSION"; printf '%s' "${!name}"; }

# check_version KEY FOUND EXPECTED SOURCE: FOUND (read from SOURCE) must match EXPECTED.
check_version() {
  if [[ -z "$2" ]]; then
    fail "$1: not installed (nothing found in $4), expected $3"
  elif ! version_matches "$2" "$3"; then
    fail "$1: found $2 in $4, expected $3"
  fi
}

if ! driver_versions="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1)"; then
  fail "driver: nvidia-smi failed: $(head -n 1 <<<"$driver_versions")"
else
  driver_versions="$(sort -u <<<"$driver_versions" | paste -sd, -)"
  [[ "$driver_versions" == "$(pinned driver)" ]] ||
    fail "driver: nvidia-smi reports $driver_versions, expected $(pinned driver)"
fi

if [[ "$GPUFLEET_NVSWITCH" == 1 ]]; then
  check_version fabric_manager "$(installed_package_version "$GPUFLEET_FABRIC_MANAGER_PACKAGE")" "$(pinned driver)" \
    "package $GPUFLEET_FABRIC_MANAGER_PACKAGE"
  enabled="$(systemctl is-enabled "$FABRIC_MANAGER_SERVICE" 2>/dev/null || true)"
  [[ "$enabled" == enabled ]] ||
    fail "fabric_manager: $FABRIC_MANAGER_SERVICE is not enabled (systemctl is-enabled: ${enabled:-no answer})"
fi

ssm_agent_enabled=""
for service in "${SSM_AGENT_SERVICES[@]}"; do
  [[ "$(systemctl is-enabled "$service" 2>/dev/null || true)" == enabled ]] && ssm_agent_enabled=$service
done
[[ -n "$ssm_agent_enabled" ]] ||
  fail "ssm_agent: none of ${SSM_AGENT_SERVICES[*]} is enabled: nodes would not answer Run Command"

cuda_found="$(installed_cuda_version)"
if [[ -z "$cuda_found" ]]; then
  fail "cuda: not installed (no $CUDA_LINK/version.json, no nvcc), expected $(pinned cuda)"
elif ! cuda_matches "$cuda_found"; then
  fail "cuda: found $cuda_found in $CUDA_LINK, expected $(pinned cuda)"
fi
check_version cudnn "$(installed_cudnn_version)" "$(first_fields "$(pinned cudnn)" 3)" "cudnn headers"
check_version nccl "$(installed_nccl_version)" "$(first_fields "$(pinned nccl)" 3)" "$(nccl_home)/include/nccl.h"
check_version efa_installer "$(installed_efa_installer_version)" "$(pinned efa_installer)" "$EFA_INSTALLED_PACKAGES"

# The net plugin NCCL will load. NCCL dlopen()s it by name, and neither NCCL 2.7.8 nor 2.27.7 logs the path it got
# (plugin 1.1.1 logs no version either), so the proof is the loader's: exactly one libnccl-net.so on the image, at
# the pinned version, and the loader cache resolving the name to it. No GPU run or EFA device needed.
mapfile -t plugins < <(nccl_net_plugins /opt /usr)
plugin_dir=""
if [[ ${#plugins[@]} -ne 1 ]]; then
  fail "aws_ofi_nccl: ${#plugins[@]} copies of $NCCL_NET_PLUGIN under /opt and /usr (${plugins[*]:-none}), expected" \
    "exactly one"
else
  plugin_dir="$(dirname "${plugins[0]}")"
  if [[ "${plugins[0]}" == "$AWS_OFI_NCCL_PREFIX"/* ]]; then
    check_version aws_ofi_nccl "$(marker_version "$AWS_OFI_NCCL_PREFIX")" "$(pinned aws_ofi_nccl)" \
      "$AWS_OFI_NCCL_PREFIX/$VERSION_MARKER_NAME"
  else
    check_version aws_ofi_nccl "$(ofi_nccl_library_version "$(root_path "${plugins[0]}")")" \
      "$(pinned aws_ofi_nccl)" "${plugins[0]}"
  fi
  resolved="$(loader_resolves "$NCCL_NET_PLUGIN" | paste -sd, -)"
  [[ "$resolved" == "${plugins[0]}" ]] ||
    fail "aws_ofi_nccl: the loader cache (ldconfig -p) resolves $NCCL_NET_PLUGIN to ${resolved:-nothing}," \
      "not ${plugins[0]}"
fi

check_version nccl_tests "$(marker_version "$NCCL_TESTS_PREFIX")" "$(pinned nccl_tests)" \
  "$NCCL_TESTS_PREFIX/$VERSION_MARKER_NAME"
for binary in "${NCCL_TESTS_BINARIES[@]}"; do
  [[ -x "$(root_path "$NCCL_TESTS_PREFIX/build/$binary")" ]] || fail "nccl_tests: missing $NCCL_TESTS_PREFIX/build/$binary"
done
check_version fsx_lustre "$(installed_package_version "$GPUFLEET_FSX_LUSTRE_PACKAGE")" "$(pinned fsx_lustre)" \
  "package $GPUFLEET_FSX_LUSTRE_PACKAGE"
check_version onednn "$(installed_onednn_version)" "$(first_fields "$(pinned onednn)" 3)" "$ONEDNN_PREFIX/include"
check_version container_toolkit "$(installed_package_version "$GPUFLEET_CONTAINER_TOOLKIT_PACKAGE")" \
  "$(pinned container_toolkit)" "package $GPUFLEET_CONTAINER_TOOLKIT_PACKAGE"

check_version aws_cli "$(installed_aws_cli_version)" "$(pinned aws_cli)" "$AWS_CLI_BIN_DIR/aws --version"
cloudwatch_agent_found="$(installed_cloudwatch_agent_version)"
cloudwatch_agent_matches "$cloudwatch_agent_found" ||
  fail "cloudwatch_agent: found ${cloudwatch_agent_found:-nothing} in $CLOUDWATCH_AGENT_DIR/bin/CWAGENT_VERSION," \
    "expected $(pinned cloudwatch_agent)"

# A virtualenv as a user makes one: python3 from PATH, in a directory of its own, removed afterwards.
python_work="$(mktemp -d)"
if ! venv_output="$(python3 -m venv "$python_work/venv" 2>&1)"; then
  fail "python: 'python3 -m venv' failed: $(grep -m 1 . <<<"$venv_output" || echo "no message")"
elif ! pip_output="$("$python_work/venv/bin/pip" --version 2>&1)"; then
  fail "python: the pip of a 'python3 -m venv' virtualenv failed: $(grep -m 1 . <<<"$pip_output" || echo "no message")"
fi
rm -rf "$python_work"
check_version uv "$(installed_uv_version)" "$GPUFLEET_UV_VERSION" "$UV_BIN_DIR/uv --version"
python_venv=""
if [[ -n "${GPUFLEET_PYTORCH_VERSION:-}" ]]; then
  python_venv="$PYTORCH_VENV"
  check_version pytorch "$(installed_pytorch_version)" "$GPUFLEET_PYTORCH_VERSION" "$PYTORCH_VENV/bin/python"
  venv_dir="$(root_path "$PYTORCH_VENV")"
  if [[ -d "$venv_dir" ]]; then
    owner="$(stat -c %u "$venv_dir")"
    writable="$(find "$venv_dir" -perm /022 ! -type l -print -quit)"
    [[ "$owner" == 0 && ! -L "$venv_dir" ]] || fail "pytorch: $PYTORCH_VENV is not a directory root owns (owner uid $owner)"
    [[ -z "$writable" ]] || fail "pytorch: ${writable#"${GPUFLEET_ROOT:-}"} is writable by others than its owner"
  fi
fi

if efa_device_present; then
  fi_info -p efa >/dev/null 2>&1 || fail "efa: an EFA device is present but 'fi_info -p efa' failed"
else
  log "no EFA device on this build instance: fi_info check skipped"
fi

[[ $failures -eq 0 ]] || die "$failures check(s) failed: /etc/gpufleet/versions.json not written"

json_string() { local value="${1//\\/\\\\}"; printf '"%s"' "${value//\"/\\\"}"; }
components=()
for key in "${COMPONENT_KEYS[@]}"; do
  if [[ "$key" == fabric_manager && "$GPUFLEET_NVSWITCH" != 1 ]]; then
    components+=("\"$key\": null") # not installed on targets without NVSwitch
  else
    components+=("\"$key\": $(json_string "$(pinned "$key")")")
  fi
done
manifest_dir="$(root_path /etc/gpufleet)"
mkdir -p "$manifest_dir"
{
  printf '{"profile": %s,\n' "$(json_string "$GPUFLEET_AMI_PROFILE")"
  printf ' "os": {"family": %s, "version": %s},\n' "$(json_string "$GPUFLEET_OS_FAMILY")" \
    "$(json_string "$GPUFLEET_OS_VERSION")"
  printf ' "components": {%s},\n' "$(IFS=,; printf '%s' "${components[*]}" | sed 's/,"/, "/g')"
  # Where the plugin lives, for the node's library path (scripts/node/efa-env.sh).
  printf ' "python": {"uv": %s, "pytorch": %s},\n' "$(json_string "$GPUFLEET_UV_VERSION")" \
    "$(if [[ -n "$python_venv" ]]; then json_string "$GPUFLEET_PYTORCH_VERSION"; else echo null; fi)"
  # The PyTorch virtualenv, for the node's python-env step (scripts/node/python-env.sh; null: none).
  printf ' "paths": {"aws_ofi_nccl_lib": %s, "python_venv": %s}}\n' "$(json_string "$plugin_dir")" \
    "$(if [[ -n "$python_venv" ]]; then json_string "$python_venv"; else echo null; fi)"
} >"$manifest_dir/versions.json.tmp"
mv "$manifest_dir/versions.json.tmp" "$manifest_dir/versions.json"
log "all components at their pinned versions; wrote /etc/gpufleet/versions.json"
