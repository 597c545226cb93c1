#!/usr/bin/env bash
# Installs the tools an AMI build runs next to gpufleet: Packer, verified before it is unpacked (HashiCorp's
# signature on packer_VERSION_SHA256SUMS made with the pinned key, the zip against that file, and the zip against
# PACKER_SHA256 when set), and AWS's session-manager-plugin, which Packer's ssh_interface "session_manager" runs.
# Settings: PACKER_VERSION, PACKER_SHA256 (empty: the signed SHA256SUMS alone), HASHICORP_KEY_FINGERPRINT,
# SESSION_MANAGER_PLUGIN_VERSION, TOOLS_BIN_DIR (where packer is unpacked; default /usr/local/bin).
set -euo pipefail

for name in PACKER_VERSION HASHICORP_KEY_FINGERPRINT SESSION_MANAGER_PLUGIN_VERSION; do
  [[ -n "${!name:-}" ]] || { echo "install-tools: $name is not set" >&2; exit 1; }
done
bin_dir="${TOOLS_BIN_DIR:-/usr/local/bin}"
# source: https://releases.hashicorp.com/packer/ (one directory per release: zips, SHA256SUMS, SHA256SUMS.sig)
releases="https://releases.hashicorp.com/packer/$PACKER_VERSION"
# source: https://www.hashicorp.com/security (HashiCorp's release signing key and its fingerprint)
hashicorp_key_url="https://www.hashicorp.com/.well-known/pgp-key.txt"
# source: https://docs.aws.amazon.com/systems-manager/latest/userguide/install-plugin-debian-and-ubuntu.html
# (versioned path: plugin/VERSION/ubuntu_64bit/session-manager-plugin.deb)
plugin_url="https://s3.amazonaws.com/session-manager-downloads/plugin/$SESSION_MANAGER_PLUGIN_VERSION/ubuntu_64bit/session-manager-plugin.deb"

downloads="$(mktemp -d)"
trap 'rm -rf "$downloads"' EXIT
zip="packer_${PACKER_VERSION}_linux_amd64.zip"
sums="packer_${PACKER_VERSION}_SHA256SUMS"
curl -fsSL -o "$downloads/$zip" "$releases/$zip"
curl -fsSL -o "$downloads/$sums" "$releases/$sums"
curl -fsSL -o "$downloads/$sums.sig" "$releases/$sums.sig"
curl -fsSL -o "$downloads/hashicorp.asc" "$hashicorp_key_url"

export GNUPGHOME="$downloads/gnupg"
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --import "$downloads/hashicorp.asc"
status="$(gpg --batch --status-fd 1 --verify "$downloads/$sums.sig" "$downloads/$sums" 2>/dev/null)" ||
  { echo "install-tools: the signature of $sums does not verify" >&2; exit 1; }
# VALIDSIG ends with the fingerprint of the primary key: any other key HashiCorp's file may carry is refused.
grep -Eq "^\[GNUPG:\] VALIDSIG .* ${HASHICORP_KEY_FINGERPRINT}$" <<<"$status" ||
  { echo "install-tools: $sums is not signed by $HASHICORP_KEY_FINGERPRINT" >&2; exit 1; }
listed="$(grep " ${zip}\$" "$downloads/$sums")" || { echo "install-tools: $sums does not list $zip" >&2; exit 1; }
(cd "$downloads" && sha256sum --check --strict - <<<"$listed") ||
  { echo "install-tools: $zip does not match $sums" >&2; exit 1; }
if [[ -n "${PACKER_SHA256:-}" ]]; then
  (cd "$downloads" && sha256sum --check --strict - <<<"$PACKER_SHA256  $zip") ||
    { echo "install-tools: $zip does not match PACKER_SHA256 (packer.sha256 of ami/pipeline.yaml)" >&2; exit 1; }
fi
unzip -o -d "$bin_dir" "$downloads/$zip"
packer version

curl -fsSL -o "$downloads/session-manager-plugin.deb" "$plugin_url"
dpkg -i "$downloads/session-manager-plugin.deb"
session-manager-plugin --version
