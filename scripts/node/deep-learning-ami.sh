#!/usr/bin/env bash
# The layout of an AWS Deep Learning AMI (GPUFLEET_DEEP_LEARNING_AMI, one of gpufleet/deep_learning_ami.py), which
# carries no gpufleet versions manifest (/etc/gpufleet/versions.json): this step reads what the later steps need from
# the image itself, at every boot, before efa-env.sh.
# - /etc/gpufleet/deep-learning-ami.json (root's, 0644), in the form of the versions manifest for the fields it has,
#   which efa-env.sh reads in its place and the health check reports:
#     {"deep_learning_ami": NAME, "components": {"aws_ofi_nccl": X, "efa_installer": Y},
#      "paths": {"aws_ofi_nccl_lib": D}}
#   D, the directory of the aws-ofi-nccl plugin (libnccl-net.so): where EFA installers from 1.39 put it,
#   /opt/amazon/ofi-nccl (lib/x86_64-linux-gnu on Ubuntu, as the image tests model installer 1.43.2; lib64 or lib
#   elsewhere), else /opt/aws-ofi-nccl/lib, where images built it before (unconfirmed for a DLAMI). X, the release the
#   library names in its "Initializing aws-ofi-nccl X" message (src/nccl_ofi_net.c from v1.10.0; scripts/ami/lib/
#   common.sh ofi_nccl_library_version reads it the same way). Y, the "# EFA installer version: Y" line of
#   /opt/amazon/efa_installed_packages (as common.sh installed_efa_installer_version reads it). What is not found is
#   left out; with EFA on (GPUFLEET_EFA=1) a missing plugin, or one that names no release, fails the step in one line.
# - /etc/gpufleet/python.env (root's, 0644), one line, GPUFLEET_PYTHON_VENV=DIR: the file gpufleet's own images carry
#   when their profile puts PyTorch in a venv; a run's body puts DIR/bin first on PATH, so `gpufleet run --torchrun --
#   python train.py` finds PyTorch on the first job. DIR is GPUFLEET_IMAGE_PYTHON_VENV, the venv the DLAMI's release
#   notes give (python_location /opt/pytorch/bin/python for the PyTorch DLAMIs); a release without DIR/bin/python fails
#   the step (AWS changed the layout, and a run would find no PyTorch). A variant without a venv (empty) has no file.
# Each file is written through a file of root's own and a rename, so a reader never sees half of it.
# Optional: GPUFLEET_ROOT (tests).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly VERSIONS=/etc/gpufleet/deep-learning-ami.json PYTHON_ENV=/etc/gpufleet/python.env
readonly PLUGIN_DIRS=(/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib
  /opt/aws-ofi-nccl/lib)

# put FILE: standard input into FILE, root's and 0644, through a temporary file and a rename.
put() {
  local file
  file=$(mktemp "$root$1.XXXXXX")
  cat >"$file"
  chmod 0644 "$file"
  mv -f "$file" "$root$1"
}

require_settings "$NODE_SETTINGS" GPUFLEET_DEEP_LEARNING_AMI GPUFLEET_EFA
root=${GPUFLEET_ROOT:-}
image=$GPUFLEET_DEEP_LEARNING_AMI
[[ $image =~ ^[a-z0-9][a-z0-9.-]*$ ]] ||
  die "GPUFLEET_DEEP_LEARNING_AMI must be a name such as pytorch-2.11-ubuntu-24.04, got '$image'"
venv=${GPUFLEET_IMAGE_PYTHON_VENV:-}
[[ -z $venv || ($venv =~ ^/[A-Za-z0-9._/-]+$ && $venv != *..*) ]] ||
  die "GPUFLEET_IMAGE_PYTHON_VENV must be an absolute path, got '$venv'"
mkdir -p "$root/etc/gpufleet"

plugin="" version=""
for dir in "${PLUGIN_DIRS[@]}"; do
  if [[ -e $root$dir/libnccl-net.so ]]; then
    plugin=$dir
    break
  fi
done
if [[ -n $plugin ]] && version=$(grep -a -o -m 1 -E 'Initializing aws-ofi-nccl [0-9][0-9A-Za-z.+~-]*' \
  "$root$plugin/libnccl-net.so"); then
  version=${version##* }
elif [[ $GPUFLEET_EFA == 1 ]]; then
  fix="choose another ami.deep_learning_ami, or pin an image with ami.id"
  [[ -n $plugin ]] || die "no aws-ofi-nccl (libnccl-net.so) in ${PLUGIN_DIRS[*]} on this $image image: $fix"
  die "$plugin/libnccl-net.so names no aws-ofi-nccl release (releases from 1.10.0 do) on this $image image: $fix"
else
  plugin=""
fi
installer=$(sed -n -E 's/^# EFA installer version: *([0-9][0-9A-Za-z.+~-]*).*/\1/p' \
  "$root/opt/amazon/efa_installed_packages" 2>/dev/null | head -n 1) || true
# Every value is a name, a version or a path of the characters matched above: nothing in them needs JSON's escapes.
components=${version:+\"aws_ofi_nccl\": \"$version\"}
components+=${installer:+${components:+, }\"efa_installer\": \"$installer\"}
printf '{"deep_learning_ami": "%s", "components": {%s}, "paths": {%s}}\n' "$image" "$components" \
  "${plugin:+\"aws_ofi_nccl_lib\": \"$plugin\"}" | put "$VERSIONS"

if [[ -z $venv || ! -x $root$venv/bin/python ]]; then
  rm -f "$root$PYTHON_ENV"
  [[ -z $venv ]] ||
    die "no $venv/bin/python on this $image image: its layout changed (choose another ami.deep_learning_ami, or pin" \
      "an image with ami.id)"
  log "$image: aws-ofi-nccl ${version:-none}; no Python venv of its own (runs use the system Python)"
  exit 0
fi
echo "GPUFLEET_PYTHON_VENV=$venv" | put "$PYTHON_ENV"
log "$image: aws-ofi-nccl ${version:-none} in ${plugin:-nowhere}; runs use $venv"
