#!/usr/bin/env bash
# Builds the image of one AMI profile: gpufleet's compatibility gate (gpufleet ami check), the Packer templates
# (gpufleet ami render, with the build instance profile of the pipeline stack), packer init, packer build. Each step
# runs only when the one before succeeded; Packer's manifest names the new image.
# Settings: PROFILE, BUILD_INSTANCE_PROFILE, AWS_REGION, CODEBUILD_BUILD_ID, PACKER_MANIFEST (the manifest to write,
# relative to the source tree), BUILD_SUBNET_ID (empty: the default VPC), GPUFLEET_VENV (default .venv).
set -euo pipefail

[[ -n "${PROFILE:-}" ]] ||
  { echo "build-image: PROFILE is not set (start the build with --environment-variables-override name=PROFILE,value=NAME)" >&2; exit 1; }
for name in BUILD_INSTANCE_PROFILE AWS_REGION CODEBUILD_BUILD_ID PACKER_MANIFEST; do
  [[ -n "${!name:-}" ]] || { echo "build-image: $name is not set" >&2; exit 1; }
done
cd "$(dirname "$0")/../.."
gpufleet="${GPUFLEET_VENV:-.venv}/bin/gpufleet"
rendered="build/$PROFILE"

"$gpufleet" ami check "$PROFILE"
"$gpufleet" ami render "$PROFILE" --out "$rendered" --instance-profile "$BUILD_INSTANCE_PROFILE"
packer init "$rendered"
packer build -color=false -var "region=$AWS_REGION" -var "subnet_id=${BUILD_SUBNET_ID:-}" \
  -var "build_id=$CODEBUILD_BUILD_ID" -var "scripts_dir=$PWD/scripts/ami" -var "manifest_path=$PWD/$PACKER_MANIFEST" \
  "$rendered"
