#!/usr/bin/env bash
# cluster-address.sh HOST CIDR: exits 0 when HOST is, or resolves to, an IPv4 address inside CIDR, 1 otherwise. The cluster user's ~/.ssh/config (cluster-user.sh writes it) runs it through
# `Match exec` for every host ssh connects to: the hosts inside the node subnet are the cluster's, whose host keys
# ssh does not check. After ParallelCluster's ssh_target_checker.sh (aws-parallelcluster-cookbook), which resolves
# the host with `getent ahosts` and compares the first IPv4 address with each CIDR under its mask.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

[[ $# -eq 2 ]] || die "usage: cluster-address.sh HOST CIDR"
host=$1
cidr=$2
[[ $cidr =~ ^([0-9]{1,3}(\.[0-9]{1,3}){3})/([0-9]{1,2})$ ]] || die "not an IPv4 CIDR: '$cidr'"
network=${BASH_REMATCH[1]}
bits=${BASH_REMATCH[3]}

# The address as a number; fails for anything but a dotted quad.
as_number() {
  local IFS=. a b c d
  [[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || return 1
  read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

address=$(getent ahostsv4 "$host" | awk 'NR == 1 {print $1}') || exit 1
target=$(as_number "$address") || exit 1
mask=$(((0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF))
(((target & mask) == ($(as_number "$network") & mask)))
