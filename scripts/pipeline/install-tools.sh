#!/usr/bin/env bash
# Installs the tools an AMI build runs next to gpufleet: Packer, verified before it is unpacked (HashiCorp's
# signature on packer_VERSION_SHA256SUMS made with the pinned key, the zip against that file, and the zip against
# GPUFLEET_PACKER_SHA256 when set), and AWS's session-manager-plugin, which Packer's ssh_interface "session_manager"
# runs.
# Settings: GPUFLEET_PACKER_VERSION, GPUFLEET_PACKER_SHA256 (empty: the signed SHA256SUMS alone),
# GPUFLEET_HASHICORP_KEY_FINGERPRINT, GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION, GPUFLEET_TOOLS_BIN_DIR (where packer is
# unpacked; default /usr/local/bin).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$PIPELINE_SETTINGS" \
  GPUFLEET_PACKER_VERSION GPUFLEET_HASHICORP_KEY_FINGERPRINT GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION
bin_dir="${GPUFLEET_TOOLS_BIN_DIR:-/usr/local/bin}"
# source: https://releases.hashicorp.com/packer/ (one directory per release: zips, SHA256SUMS, SHA256SUMS.sig)
releases="https://releases.hashicorp.com/packer/$GPUFLEET_PACKER_VERSION"
# source: https://www.hashicorp.com/security (HashiCorp's release signing key and its fingerprint)
hashicorp_key_url="https://www.hashicorp.com/.well-known/pgp-key.txt"
# source: https://docs.aws.amazon.com/systems-manager/latest/userguide/install-plugin-debian-and-ubuntu.html
# (versioned path: plugin/VERSION/ubuntu_64bit/session-manager-plugin.deb)
plugin_url="https://s3.amazonaws.com/session-manager-downloads/plugin/$GPUFLEET_SESSION_MANAGER_PLUGIN_VERSION/ubuntu_64bit/session-manager-plugin.deb"

downloads="$(mktemp -d)"
trap 'rm -rf "$downloads"' EXIT
zip="packer_${GPUFLEET_PACKER_VERSION}_linux_amd64.zip"
sums="packer_${GPUFLEET_PACKER_VERSION}_SHA256SUMS"
curl -fsSL -o "$downloads/$zip" "$releases/$zip"
curl -fsSL -o "$downloads/$sums" "$releases/$sums"
curl -fsSL -o "$downloads/$sums.sig" "$releases/$sums.sig"
curl -fsSL -o "$downloads/hashicorp.asc" "$hashicorp_key_url"

export GNUPGHOME="$downloads/gnupg"
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --import "$downloads/hashicorp.asc"
status="$(gpg --batch --status-fd 1 --verify "$downloads/$sums.sig" "$downloads/$sums" 2>/dev/null)" ||
  die "the signature of $sums does not verify"
# VALIDSIG ends with the fingerprint of the primary key: any other key HashiCorp's file may carry is refused.
grep -Eq "^\[GNUPG:\] VALIDSIG .* ${GPUFLEET_HASHICORP_KEY_FINGERPRINT}$" <<<"$status" ||
  die "$sums is not signed by $GPUFLEET_HASHICORP_KEY_FINGERPRINT"
listed="$(grep " ${zip}\$" "$downloads/$sums")" || die "$sums does not list $zip"
(cd "$downloads" && sha256sum --check --strict - <<<"$listed") || die "$zip does not match $sums"
if [[ -n "${GPUFLEET_PACKER_SHA256:-}" ]]; then
  (cd "$downloads" && sha256sum --check --strict - <<<"$GPUFLEET_PACKER_SHA256  $zip") ||
    die "$zip does not match GPUFLEET_PACKER_SHA256 (packer.sha256 of ami/pipeline.yaml)"
fi
unzip -o -d "$bin_dir" "$downloads/$zip"
packer version

curl -fsSL -o "$downloads/session-manager-plugin.deb" "$plugin_url"
dpkg -i "$downloads/session-manager-plugin.deb"
session-manager-plugin --version
