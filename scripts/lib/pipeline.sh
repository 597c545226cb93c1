# shellcheck shell=bash
# The AMI pipeline's own helpers (scripts/pipeline/acceptance-gate.sh, acceptance-teardown.sh and publish-image.sh
# source it after helpers.sh). Apart from scripts/lib/helpers.sh because the nodes' user data carries helpers.sh, and EC2 gives user
# data 16 KiB (gpufleet/user_data.py): what only the pipeline runs stays out of it.

# The AMI pipeline's acceptance gate names its short-lived environment after the build: accept- and the first 8
# hex digits of the build's uuid, the part after the last ':' of both CODEBUILD_BUILD_ID (PROJECT:UUID) and
# CODEBUILD_BUILD_ARN (arn:...:build/PROJECT:UUID). Its one stack is gpufleet-NAME-cluster. The gate deploys it and
# acceptance-teardown.sh deletes it, also when started for another build by the stack's backstop rule.
acceptance_environment_name() {
  local uuid=${1##*:}
  printf 'accept-%s\n' "${uuid:0:8}"
}

# packer_image MANIFEST: the AMI id of the last run of Packer's manifest post-processor. The manifest accumulates
# runs; the image is the artifact of the last one, "REGION:ami-...".
packer_image() {
  local image
  image="$(python3 - "$1" <<'PYTHON'
import json, sys
manifest = json.load(open(sys.argv[1]))
builds = [b for b in manifest.get("builds", []) if b.get("packer_run_uuid") == manifest.get("last_run_uuid")]
print(builds[-1]["artifact_id"].split(":")[-1] if builds else "")
PYTHON
)" || return
  [[ "$image" =~ ^ami-[0-9a-f]{8}([0-9a-f]{9})?$ ]] || {
    error "no AMI id in the last run of $1 (found '${image}')"
    return 1
  }
  printf '%s\n' "$image"
}
