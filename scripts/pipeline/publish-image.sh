#!/usr/bin/env bash
# Publishes the image of the last `packer build` (read from Packer's manifest) where environments read it: in the
# build region as it is, and in every other region of the profile as an encrypted copy with the image's tags. Each
# region gets the SSM parameter /gpufleet/ami/PROFILE (tagged with the build) once its image is available there.
# Regions are independent: a copy that fails leaves that region's parameter on its previous image, the other regions
# are still published, and the script fails at the end naming the regions it could not publish.
# Settings: GPUFLEET_AMI_PROFILE, GPUFLEET_PACKER_MANIFEST (relative to the source tree), CODEBUILD_BUILD_ID,
# AWS_REGION (the build region), GPUFLEET_PUBLISH_REGIONS (space-separated PROFILE=REGION,REGION,... entries; a
# profile without one is published in the build region only).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
# shellcheck source=../lib/pipeline.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/pipeline.sh"

require_settings "$PIPELINE_SETTINGS" GPUFLEET_AMI_PROFILE GPUFLEET_PACKER_MANIFEST CODEBUILD_BUILD_ID AWS_REGION
profile=$GPUFLEET_AMI_PROFILE
manifest=$GPUFLEET_PACKER_MANIFEST
cd "$(dirname "$0")/../.."
[[ -f "$manifest" ]] || die "$manifest not found (did packer build finish?)"

image="$(packer_image "$manifest")"

regions="$AWS_REGION"
read -ra entries <<<"${GPUFLEET_PUBLISH_REGIONS:-}"
for entry in "${entries[@]}"; do
  if [[ "${entry%%=*}" == "$profile" ]]; then
    regions="${entry#*=}"
  fi
done
IFS=, read -ra regions <<<"$regions"

parameter="/gpufleet/ami/$profile"
tags="{Key=gpufleet:profile,Value=$profile},{Key=gpufleet:build-id,Value=$CODEBUILD_BUILD_ID}"
declare -A images=()
failed=()

# `aws ec2 wait image-available` gives up after 40 polls 15 s apart (botocore's ec2 waiters-2.json, ImageAvailable);
# copying an image of this size across regions can take longer, so a copy still pending gets more rounds (2 hours).
wait_until_available() {
  local region="$1" copy="$2" round state
  for ((round = 1; round <= 12; round++)); do
    aws ec2 wait image-available --region "$region" --image-ids "$copy" && return 0
    state="$(aws ec2 describe-images --region "$region" --image-ids "$copy" --query 'Images[0].State' --output text)" ||
      return 1
    [[ "$state" == pending ]] || { error "$copy in $region is $state"; return 1; }
  done
  return 1
}

# Start every copy first: they run in parallel on AWS's side.
name=""
for region in "${regions[@]}"; do
  if [[ "$region" == "$AWS_REGION" ]]; then
    images[$region]="$image"
    continue
  fi
  [[ -n "$name" ]] ||
    name="$(aws ec2 describe-images --region "$AWS_REGION" --image-ids "$image" --query 'Images[0].Name' --output text)" ||
    name=""
  # source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CopyImage.html (CopyImageTags copies the
  # image's user-defined tags; TagSpecifications tag the new image and its snapshots; Encrypted without KmsKeyId
  # uses the destination region's AWS managed EBS key)
  if [[ -n "$name" ]] && copy="$(aws ec2 copy-image --region "$region" --source-region "$AWS_REGION" \
      --source-image-id "$image" --name "$name" --encrypted --copy-image-tags \
      --tag-specifications "ResourceType=image,Tags=[$tags]" "ResourceType=snapshot,Tags=[$tags]" \
      --query ImageId --output text)"; then
    images[$region]="$copy"
    log "copying $image to $region as $copy"
  else
    error "copying $image to $region failed; $parameter there keeps its image"
    failed+=("$region")
  fi
done

for region in "${regions[@]}"; do
  [[ -n "${images[$region]:-}" ]] || continue
  published="${images[$region]}"
  if [[ "$region" != "$AWS_REGION" ]] && ! wait_until_available "$region" "$published"; then
    error "$published in $region is not available; $parameter there keeps its image"
    failed+=("$region")
    continue
  fi
  if aws ssm put-parameter --region "$region" --name "$parameter" --type String --data-type aws:ec2:image \
      --value "$published" --overwrite \
      --description "gpufleet AMI of profile $profile (written by the AMI pipeline)" >/dev/null &&
    aws ssm add-tags-to-resource --region "$region" --resource-type Parameter --resource-id "$parameter" \
      --tags "Key=gpufleet:profile,Value=$profile" "Key=gpufleet:build-id,Value=$CODEBUILD_BUILD_ID" >/dev/null; then
    log "published $published to $parameter in $region (build $CODEBUILD_BUILD_ID)"
  else
    error "writing $parameter in $region failed"
    failed+=("$region")
  fi
done

if ((${#failed[@]})); then
  die "$profile is not published in ${failed[*]} (the build log above says why)"
fi
