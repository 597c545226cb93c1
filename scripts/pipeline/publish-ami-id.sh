#!/usr/bin/env bash
# Publishes the image of the last `packer build` (read from Packer's manifest) to the SSM parameter
# /gpufleet/ami/PROFILE, which cluster environments read (ami.ssm_parameter), and tags the parameter with the build.
# Settings: GPUFLEET_PROFILE, PACKER_MANIFEST (manifest.json of the build), GPUFLEET_BUILD_ID (CodeBuild build id).
set -euo pipefail

for name in GPUFLEET_PROFILE PACKER_MANIFEST GPUFLEET_BUILD_ID; do
  [[ -n "${!name:-}" ]] || { echo "publish-ami-id: $name is not set" >&2; exit 1; }
done
[[ -f "$PACKER_MANIFEST" ]] || { echo "publish-ami-id: $PACKER_MANIFEST not found (did packer build finish?)" >&2; exit 1; }

# The manifest accumulates runs; the image is the artifact of the last run, "REGION:ami-...".
ami_id="$(python3 - "$PACKER_MANIFEST" <<'PYTHON'
import json, sys
manifest = json.load(open(sys.argv[1]))
builds = [b for b in manifest.get("builds", []) if b.get("packer_run_uuid") == manifest.get("last_run_uuid")]
print(builds[-1]["artifact_id"].split(":")[-1] if builds else "")
PYTHON
)"
[[ "$ami_id" =~ ^ami-[0-9a-f]{8}([0-9a-f]{9})?$ ]] ||
  { echo "publish-ami-id: no AMI id in the last run of $PACKER_MANIFEST (found '${ami_id}')" >&2; exit 1; }

parameter="/gpufleet/ami/$GPUFLEET_PROFILE"
aws ssm put-parameter --name "$parameter" --type String --data-type aws:ec2:image --value "$ami_id" --overwrite \
  --description "gpufleet AMI of profile $GPUFLEET_PROFILE (written by the AMI pipeline)" >/dev/null
aws ssm add-tags-to-resource --resource-type Parameter --resource-id "$parameter" \
  --tags "Key=gpufleet:profile,Value=$GPUFLEET_PROFILE" "Key=gpufleet:build-id,Value=$GPUFLEET_BUILD_ID" >/dev/null
echo "published $ami_id to $parameter (build $GPUFLEET_BUILD_ID)"
