#!/usr/bin/env bash
# Builds the image of one AMI profile: gpufleet's compatibility gate (gpufleet ami check), the Packer templates
# (gpufleet ami render, with the build instance profile of the pipeline stack), packer init, packer build. Each step
# runs only when the one before succeeded; Packer's manifest names the new image.
# Settings: GPUFLEET_AMI_PROFILE (each build is started with it), GPUFLEET_BUILD_INSTANCE_PROFILE, AWS_REGION,
# CODEBUILD_BUILD_ID, GPUFLEET_PACKER_MANIFEST (the manifest to write, relative to the source tree),
# GPUFLEET_BUILD_SUBNET_ID (empty: the default VPC), GPUFLEET_VENV (default .venv).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$PIPELINE_SETTINGS" \
  GPUFLEET_AMI_PROFILE GPUFLEET_BUILD_INSTANCE_PROFILE AWS_REGION CODEBUILD_BUILD_ID GPUFLEET_PACKER_MANIFEST
cd "$(dirname "$0")/../.."
gpufleet="${GPUFLEET_VENV:-.venv}/bin/gpufleet"
rendered="build/$GPUFLEET_AMI_PROFILE"

"$gpufleet" ami check "$GPUFLEET_AMI_PROFILE"
"$gpufleet" ami render "$GPUFLEET_AMI_PROFILE" --out "$rendered" --instance-profile "$GPUFLEET_BUILD_INSTANCE_PROFILE"
packer init "$rendered"
packer build -color=false -var "region=$AWS_REGION" -var "subnet_id=${GPUFLEET_BUILD_SUBNET_ID:-}" \
  -var "build_id=$CODEBUILD_BUILD_ID" -var "scripts_dir=$PWD/scripts/ami" \
  -var "manifest_path=$PWD/$GPUFLEET_PACKER_MANIFEST" "$rendered"
