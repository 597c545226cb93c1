#!/usr/bin/env bash
# Makes sure the Debian tools the tests drive are present: installs them as root, otherwise says what to run.
set -euo pipefail

readonly PACKAGES=(packer shellcheck bats)
missing=()
for package in "${PACKAGES[@]}"; do
  command -v "$package" >/dev/null 2>&1 || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "missing tools: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
