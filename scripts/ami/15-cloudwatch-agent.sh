#!/usr/bin/env bash
# The Amazon CloudWatch agent at the pinned build: the package for the OS (the profile's URL names a .deb or an
# .rpm), checked against its detached signature (URL.sig) made by the key the CloudWatch user guide gives the
# fingerprint of. Installed, not started and not configured: the node's cloudwatch-agent setup step
# (scripts/node/cloudwatch-agent.sh) writes the environment's configuration and starts it at boot.
# source: CloudWatch user guide, download-cloudwatch-agent-commandline.html (S3 package per OS; "sudo dpkg -i -E
# ./amazon-cloudwatch-agent.deb", "sudo rpm -U ./amazon-cloudwatch-agent.rpm") and
# verify-CloudWatch-Agent-Package-Signature.html (assets/amazon-cloudwatch-agent.gpg, fingerprint
# 9376 16F3 450B 7D80 6CBD 9725 D581 6730 3B78 9C72, the package URL + .sig).
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_CLOUDWATCH_AGENT_VERSION GPUFLEET_CLOUDWATCH_AGENT_URL \
  GPUFLEET_CLOUDWATCH_AGENT_GPG_KEY_URL GPUFLEET_CLOUDWATCH_AGENT_GPG_KEY_FINGERPRINT
found="$(installed_cloudwatch_agent_version)"
if cloudwatch_agent_matches "$found"; then
  log "CloudWatch agent already at $found: nothing to do"
  exit 0
fi

url="$GPUFLEET_CLOUDWATCH_AGENT_URL"
expected_type=rpm
is_ubuntu && expected_type=deb
[[ "$url" == *".$expected_type" ]] ||
  die "GPUFLEET_CLOUDWATCH_AGENT_URL $url is not a .$expected_type package, which $GPUFLEET_OS_FAMILY installs"
work="$(build_dir cloudwatch-agent)"
package="$work/$(basename "$url")"
download "$url" "$package" "${GPUFLEET_CLOUDWATCH_AGENT_SHA256:-}"
download "$url.sig" "$package.sig" ""
download "$GPUFLEET_CLOUDWATCH_AGENT_GPG_KEY_URL" "$work/amazon-cloudwatch-agent.gpg" ""
verify_signature "$package" "$package.sig" "$work/amazon-cloudwatch-agent.gpg" \
  "$GPUFLEET_CLOUDWATCH_AGENT_GPG_KEY_FINGERPRINT"

if is_ubuntu; then
  dpkg -i -E "$package"
else
  rpm -U --replacepkgs "$package"
fi
found="$(installed_cloudwatch_agent_version)"
cloudwatch_agent_matches "$found" ||
  die "the package left CloudWatch agent ${found:-nothing} in $CLOUDWATCH_AGENT_DIR/bin/CWAGENT_VERSION," \
    "expected $GPUFLEET_CLOUDWATCH_AGENT_VERSION"
log "CloudWatch agent $GPUFLEET_CLOUDWATCH_AGENT_VERSION installed ($CLOUDWATCH_AGENT_DIR), not started"
