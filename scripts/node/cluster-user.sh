#!/usr/bin/env bash
# Makes the cluster user, GPUFLEET_CLUSTER_USER with uid and gid GPUFLEET_CLUSTER_UID, and its SSH trust inside the
# cluster: every node holds the same key, so that `mpirun` on any node reaches every other node without a prompt
# (Open MPI starts its daemons over SSH: open-mpi docs, launching-apps/ssh).
# - The account: a login shell, no password ("*": sshd refuses key logins to a locked account, whose password starts
#   with "!", when it does not use PAM: openssh-portable auth.c allowed_user, LOCKED_PASSWD_PREFIX), no sudo, no
#   groups beyond its own. Its home is GPUFLEET_CLUSTER_HOME: on the shared file system where the environment has one
#   (GPUFLEET_SHARED_DIR/home/NAME, mounted by the step before this one), so every node sees the same home, as
#   ParallelCluster shares /home; else /home/NAME on each node's root volume. Every file SSH needs is written again
#   at every boot, identical on every node, each through a file of this node's own and a rename, since on shared
#   storage other nodes write the same files at the same time.
# - The key: the private key the cluster stack made at deploy time, read from the Secrets Manager secret
#   GPUFLEET_CLUSTER_KEY_SECRET with the AWS CLI and the node role's credentials. It is written to a file and nowhere
#   else: never printed, logged or kept in a variable.
# - authorized_keys: its public key, usable from the node subnet only (from="CIDR": sshd(8), AUTHORIZED_KEYS FILE
#   FORMAT, "from=pattern-list", CIDR address/masklen).
# - ~/.ssh/config: no host key check and no known_hosts for hosts in the node subnet, which cluster-address.sh
#   decides for ssh (Match exec); a new node takes the address of an old one with another host key. Host keys stay
#   checked everywhere else. After ParallelCluster (aws-parallelcluster-cookbook: cluster_user.rb, platform.rb's
#   openssh client settings, ssh_target_checker.sh), which checks the VPC's CIDR blocks; here the node subnet's,
#   where every node of the environment is (EFA reaches only its own subnet).
# - sshd: the image build deletes the host keys (scripts/ami/14-cleanup.sh), so missing ones are made
#   (ssh-keygen -A: "for each of the key types ... for which host keys do not exist, generate the host keys",
#   ssh-keygen(1)) before sshd is started.
# The node subnet and the region come from IMDSv2 (network/interfaces/macs/MAC/subnet-ipv4-cidr-block,
# placement/region: EC2 user guide, instancedata-data-categories).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_CLUSTER_USER GPUFLEET_CLUSTER_UID GPUFLEET_CLUSTER_HOME \
  GPUFLEET_CLUSTER_KEY_SECRET
user=$GPUFLEET_CLUSTER_USER
uid=$GPUFLEET_CLUSTER_UID
secret=$GPUFLEET_CLUSTER_KEY_SECRET
[[ $user =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || die "GPUFLEET_CLUSTER_USER must be a user name, got '$user'"
[[ $uid =~ ^[1-9][0-9]{3,8}$ ]] || die "GPUFLEET_CLUSTER_UID must be a uid from 1000 up, got '$uid'"
[[ $GPUFLEET_CLUSTER_HOME =~ ^/[A-Za-z0-9._/-]+$ ]] ||
  die "GPUFLEET_CLUSTER_HOME must be an absolute path, got '$GPUFLEET_CLUSTER_HOME'"
imds=${GPUFLEET_IMDS_URL:-http://169.254.169.254}
command -v aws >/dev/null || die "no AWS CLI on this node (aws is not on PATH) to read the key from secret $secret"

# Prints IMDSv2 item $1.
metadata() {
  local token
  if ! token=$(curl -fsS --retry 3 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" "$imds/latest/api/token") ||
    ! curl -fsS --retry 3 -H "X-aws-ec2-metadata-token: $token" "$imds/latest/meta-data/$1"; then
    die "cannot read $1 from $imds"
  fi
}

# The same uid and gid on every node, or the node refuses: files on shared storage keep their owner by number.
if entry=$(getent passwd "$user"); then
  [[ $entry == "$user:"*":$uid:$uid:"* ]] || die "user $user is not uid and gid $uid on this image: remove it from the image"
else
  for database in passwd group; do
    if entry=$(getent "$database" "$uid"); then
      [[ $database == group && ${entry%%:*} == "$user" ]] || die "id $uid is ${entry%%:*}'s on this image ($database)"
    fi
  done
  getent group "$user" >/dev/null || groupadd --gid "$uid" "$user"
  useradd --uid "$uid" --gid "$uid" --no-create-home --home-dir "$GPUFLEET_CLUSTER_HOME" --shell /bin/bash \
    --password '*' "$user"
  log "created user $user (uid $uid)"
fi
home=$(getent passwd "$user" | cut -d: -f6)
# The first node to get here makes a shared home; the others find it. sshd's StrictModes refuses a home that others
# may write to (sshd_config(5)).
mkdir -p "${GPUFLEET_ROOT:-}$home"
chmod 0750 "${GPUFLEET_ROOT:-}$home"
chown "$uid:$uid" "${GPUFLEET_ROOT:-}$home"

mac=$(metadata mac)
subnet=$(metadata "network/interfaces/macs/$mac/subnet-ipv4-cidr-block")
[[ $subnet =~ ^[0-9.]+/[0-9]+$ ]] || die "not a subnet CIDR from IMDS: '$subnet'"
region=$(metadata placement/region)

ssh_dir=${GPUFLEET_ROOT:-}$home/.ssh
umask 077
mkdir -p "$ssh_dir"
key=$ssh_dir/id_ed25519
new_key=$(mktemp "$key.XXXXXX")
trap 'rm -f "$new_key"' EXIT

# Writes its input to file $1 through a file of this node's own, then renames it over $1.
put() {
  local file
  file=$(mktemp "$1.XXXXXX")
  cat >"$file"
  mv -f "$file" "$1"
}

aws secretsmanager get-secret-value --region "$region" --secret-id "$secret" --query SecretString --output text \
  >"$new_key" || die "cannot read the key from secret $secret (see the AWS CLI's error above)"
public_key=$(ssh-keygen -y -f "$new_key") || die "secret $secret holds no OpenSSH private key"
mv -f "$new_key" "$key"
read -r key_type key_body _ <<<"$public_key"
echo "$key_type $key_body $user" | put "$key.pub"
echo "from=\"$subnet\" $key_type $key_body $user" | put "$ssh_dir/authorized_keys"
put "$ssh_dir/config" <<EOF
Match exec "$(dirname "$(readlink -f "$0")")/cluster-address.sh %h $subnet"
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
EOF
chmod 0644 "$key.pub"
chown -R "$uid:$uid" "$ssh_dir"
log "$user trusts its key from $subnet, where host keys are not checked"

ssh-keygen -A
systemctl start sshd.service 2>/dev/null || systemctl start ssh.service || die "cannot start sshd"
