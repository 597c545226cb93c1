#!/usr/bin/env bash
# AWS CLI version 2 at the pinned version, on every OS: the zip installer, checked against its detached signature
# (URL.sig) made by the AWS CLI Team key, into /usr/local/aws-cli with /usr/local/bin/aws. The nodes' spot watcher
# completes Auto Scaling lifecycle actions with it. Amazon Linux 2 ships the yum package awscli, version 1: the user
# guide says to remove it first, so one aws is on the image.
# source: AWS CLI user guide, getting-started-install.html (Linux: "curl ... awscli-exe-linux-x86_64.zip", "sudo
# ./aws/install", "--update"; "Verify the integrity and authenticity of the downloaded installer files": the key, its
# fingerprint FB5D B77F D5C1 18B8 0511 ADA8 A631 0ACC 4672 475C, URL + .sig; Amazon Linux: "sudo yum remove awscli")
# and getting-started-version.html (a past release: awscli-exe-linux-x86_64-VERSION.zip).
set -euo pipefail
# shellcheck source=lib/common.sh
source "${GPUFLEET_LIB_DIR:-$(dirname "${BASH_SOURCE[0]}")/lib}/common.sh"

require_env GPUFLEET_OS_FAMILY GPUFLEET_AWS_CLI_VERSION GPUFLEET_AWS_CLI_URL GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT
already_at "AWS CLI" "$(installed_aws_cli_version)" "$GPUFLEET_AWS_CLI_VERSION" && exit 0

fingerprint="$GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT"
work="$(build_dir aws-cli)"
zip="$work/awscliv2.zip"
download "$GPUFLEET_AWS_CLI_URL" "$zip" "${GPUFLEET_AWS_CLI_SHA256:-}"
download "$GPUFLEET_AWS_CLI_URL.sig" "$zip.sig" ""
if [[ -n "${GPUFLEET_AWS_CLI_GPG_KEY_URL:-}" ]]; then
  download "$GPUFLEET_AWS_CLI_GPG_KEY_URL" "$work/aws-cli.asc" ""
  key="$work/aws-cli.asc"
else
  # The user guide prints the key rather than linking to a file: gpufleet carries that text.
  key="$KEYS_DIR/$fingerprint.asc"
  [[ -f "$key" ]] || die "no key $key for GPUFLEET_AWS_CLI_GPG_KEY_FINGERPRINT $fingerprint (scripts/ami/lib/keys/)"
fi
verify_signature "$zip" "$zip.sig" "$key" "$fingerprint"

if ! is_ubuntu && [[ -n "$(installed_package_version awscli)" ]]; then
  "$(amzn_package_manager)" remove -y -q awscli
  log "removed the OS package awscli (AWS CLI version 1)"
fi
unzip -q -o "$zip" -d "$work"
"$work/aws/install" --install-dir "$(root_path "$AWS_CLI_INSTALL_DIR")" --bin-dir "$(root_path "$AWS_CLI_BIN_DIR")" \
  --update
installed="$(installed_aws_cli_version)"
version_matches "$installed" "$GPUFLEET_AWS_CLI_VERSION" ||
  die "the installer left AWS CLI ${installed:-nothing} at $AWS_CLI_BIN_DIR/aws, expected $GPUFLEET_AWS_CLI_VERSION"
log "AWS CLI $GPUFLEET_AWS_CLI_VERSION installed ($AWS_CLI_BIN_DIR/aws)"
