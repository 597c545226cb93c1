#!/usr/bin/env bash
# Makes sure the Debian tools the tests drive are present: installs them as root, otherwise says what to run.
# Each entry is COMMAND:PACKAGE, the command that shows the package is there. mpirun, sshd and ssh: the cluster
# user's SSH trust is tested with the real Open MPI and OpenSSH (tests/scripts/node/test_cluster_ssh.py); Debian's
# packages: openmpi-bin (mpirun, orted), openssh-server (sshd, in /usr/sbin), openssh-client (ssh, ssh-keygen)
# (packages.debian.org, bookworm). torchrun: the generated torchrun command line runs for real with PyTorch
# (tests/examples/test_ddp_train.py); Debian's python3-torch (1.13.1, CPU only) installs /usr/bin/torchrun and torch
# for /usr/bin/python3 (dpkg -L python3-torch), not into the project's virtualenv. mmdebstrap and dnsmasq: the cluster in
# a box (tests/box) builds its nodes' root file system with mmdebstrap and gives them DHCP and DNS with dnsmasq
# (Debian's dnsmasq-base: /usr/sbin/dnsmasq without the system service).
set -euo pipefail

readonly TOOLS=(
  packer:packer
  shellcheck:shellcheck
  bats:bats
  mpirun:openmpi-bin
  sshd:openssh-server
  ssh:openssh-client
  torchrun:python3-torch
  mmdebstrap:mmdebstrap
  dnsmasq:dnsmasq-base
)
missing=()
for tool in "${TOOLS[@]}"; do
  command=${tool%%:*}
  # sshd and dnsmasq live in /usr/sbin, which a non-root PATH may lack.
  command -v "$command" >/dev/null 2>&1 || [[ -x /usr/sbin/$command ]] || missing+=("${tool#*:}")
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
