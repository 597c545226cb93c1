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
#   storage other nodes write the same files at the same time. Root makes and chowns the home only; every file under
#   it is written by a process of the user's (runuser, util-linux), so that a link the user planted there leads
#   nowhere the user could not write anyway.
# - The key: the private key the cluster stack made at deploy time, read from the Secrets Manager secret
#   GPUFLEET_CLUSTER_KEY_SECRET with the AWS CLI and the node role's credentials. It is written to a file and nowhere
#   else: never printed, logged or kept in a variable.
# - authorized_keys: its public key, usable from the node subnet only (from="CIDR": sshd(8), AUTHORIZED_KEYS FILE
#   FORMAT, "from=pattern-list", CIDR address/masklen), in /etc/ssh/gpufleet-authorized-keys/USER, which only root
#   writes; sshd reads the cluster user's keys from there alone, and lets root in by no key (the block this script
#   keeps at the end of sshd_config).
# - ~/.ssh/config: no host key check and no known_hosts for hosts in the node subnet, which cluster-address.sh
#   decides for ssh (Match exec); a new node takes the address of an old one with another host key. Host keys stay
#   checked everywhere else. After ParallelCluster (aws-parallelcluster-cookbook: cluster_user.rb, platform.rb's
#   openssh client settings, ssh_target_checker.sh), which checks the VPC's CIDR blocks; here the node subnet's,
#   where every node of the environment is (EFA reaches only its own subnet).
# - sshd: the image build deletes the host keys (scripts/ami/16-cleanup.sh), so missing ones are made
#   (ssh-keygen -A: "for each of the key types ... for which host keys do not exist, generate the host keys",
#   ssh-keygen(1)) before sshd is started or reloaded.
# The node subnet and the region come from IMDSv2 (network/interfaces/macs/MAC/subnet-ipv4-cidr-block,
# placement/region: EC2 user guide, instancedata-data-categories).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

# The cluster key's authorized_keys, one file a user, root's; sshd's configuration, which gets gpufleet's block.
readonly KEYS_DIR=/etc/ssh/gpufleet-authorized-keys SSHD_CONFIG=/etc/ssh/sshd_config
readonly CONFIG_BEGIN="# BEGIN gpufleet cluster-user.sh" CONFIG_END="# END gpufleet cluster-user.sh"

require_settings "$NODE_SETTINGS" GPUFLEET_CLUSTER_USER GPUFLEET_CLUSTER_UID GPUFLEET_CLUSTER_HOME \
  GPUFLEET_CLUSTER_KEY_SECRET
user=$GPUFLEET_CLUSTER_USER
uid=$GPUFLEET_CLUSTER_UID
secret=$GPUFLEET_CLUSTER_KEY_SECRET
[[ $user =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || die "GPUFLEET_CLUSTER_USER must be a user name, got '$user'"
[[ $uid =~ ^[1-9][0-9]{3,8}$ ]] || die "GPUFLEET_CLUSTER_UID must be a uid from 1000 up, got '$uid'"
[[ $GPUFLEET_CLUSTER_HOME =~ ^/[A-Za-z0-9._/-]+$ ]] ||
  die "GPUFLEET_CLUSTER_HOME must be an absolute path, got '$GPUFLEET_CLUSTER_HOME'"
command -v aws >/dev/null || die "no AWS CLI on this node (aws is not on PATH) to read the key from secret $secret"

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
[[ $home =~ ^/[A-Za-z0-9._/-]+$ && $home != *..* ]] || die "$user's home must be an absolute path, got '$home'"
# The first node to get here makes a shared home; the others find it. sshd's StrictModes refuses a home that others
# may write to (sshd_config(5)). The home's parents must be root's and no links: the shared file system is writable by
# every user (shared-storage.sh makes its root 1777), and a parent the cluster user had made, or a link to /etc, would
# have root make and chown a directory of the user's choosing. The home itself sits in a directory only root writes,
# so the user cannot swap it for a link between the check and the chown.
parent=${home%/*}
mkdir -p "${GPUFLEET_ROOT:-}${parent:-/}"
path=""
for part in ${parent//\// }; do
  path+=/$part
  [[ ! -L ${GPUFLEET_ROOT:-}$path && $(stat -c %u "${GPUFLEET_ROOT:-}$path") == 0 ]] ||
    die "$path, a parent of $user's home, is a link or not root's: remove it (it may be a trap) and run again"
done
if [[ -L ${GPUFLEET_ROOT:-}$home ]]; then
  die "$user's home $home is a link: remove it and run again"
fi
mkdir -p "${GPUFLEET_ROOT:-}$home"
chmod 0750 "${GPUFLEET_ROOT:-}$home"
chown "$uid:$uid" "${GPUFLEET_ROOT:-}$home"

token=$(imds_token) || die "no IMDSv2 token from $IMDS_URL"
mac=$(imds_get "$token" mac) || die "cannot read mac from $IMDS_URL"
subnet=$(imds_get "$token" "network/interfaces/macs/$mac/subnet-ipv4-cidr-block") ||
  die "cannot read the node subnet from $IMDS_URL"
[[ $subnet =~ ^[0-9.]+/[0-9]+$ ]] || die "not a subnet CIDR from IMDS: '$subnet'"
region=$(imds_get "$token" placement/region) || die "cannot read placement/region from $IMDS_URL"

# Everything under the home is the user's: root writes none of it. Root reads the key into a directory of its own;
# a process of the user's then writes each file, through a file of its own and a rename (on shared storage other
# nodes write the same files at the same time). A link the user planted (~/.ssh to /root/.ssh, a key file to
# /etc/shadow) then leads a process that may write only what the user may: root follows nothing.
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
aws secretsmanager get-secret-value --region "$region" --secret-id "$secret" --query SecretString --output text \
  >"$work/key" || die "cannot read the key from secret $secret (see the AWS CLI's error above)"
public_key=$(ssh-keygen -y -f "$work/key") || die "secret $secret holds no OpenSSH private key"
read -r key_type key_body _ <<<"$public_key"
echo "$key_type $key_body $user" >"$work/id_ed25519.pub"
echo "from=\"$subnet\" $key_type $key_body $user" >"$work/authorized_keys"
cat >"$work/config" <<EOF
Match exec "$(dirname "$(readlink -f "$0")")/cluster-address.sh %h $subnet"
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
EOF
# The user's shell: $1 the .ssh directory (a link or a file there is the user's own, replaced), $2 the file's name,
# $3 its mode; the content on standard input, since the user cannot open root's directory.
# shellcheck disable=SC2016 # expanded by the user's shell
write_as_user='set -eu
umask 077
if [ -L "$1" ] || { [ -e "$1" ] && [ ! -d "$1" ]; }; then rm -f "$1"; fi
mkdir -p "$1"
chmod 0700 "$1"
file=$(mktemp "$1/$2.XXXXXX")
cat >"$file"
chmod "$3" "$file"
mv -f "$file" "$1/$2"'
for entry in id_ed25519:0600:key id_ed25519.pub:0644:id_ed25519.pub config:0600:config; do
  IFS=: read -r name mode source <<<"$entry"
  runuser -u "$user" -- sh -c "$write_as_user" sh "${GPUFLEET_ROOT:-}$home/.ssh" "$name" "$mode" <"$work/$source" ||
    die "could not write $home/.ssh/$name as $user"
done

# The keys sshd accepts for the cluster user are in a file only root writes (KEYS_DIR/USER), not in the user's
# ~/.ssh/authorized_keys, which any of its processes could change; and root logs in with no key at all. Both are a
# block of sshd's own configuration, replaced whole at every boot between its marker lines and appended at the end,
# where Match blocks belong (sshd_config(5), Match: "If all of the criteria on the Match line are satisfied, the
# keywords on the following lines override those set in the global section of the config file, until either another
# Match line or the end of the file"; AuthorizedKeysFile and PermitRootLogin are among the keywords a Match block
# takes, and %u is the user's name, TOKENS). The file is checked with `sshd -t` before it is put in place.
keys_dir=${GPUFLEET_ROOT:-}$KEYS_DIR
install -d -m 0755 "$keys_dir"
keys=$(mktemp "$keys_dir/.$user.XXXXXX")
cp "$work/authorized_keys" "$keys"
chmod 0644 "$keys"
mv -f "$keys" "$keys_dir/$user"
sshd_config=${GPUFLEET_ROOT:-}$SSHD_CONFIG
new_config=$(mktemp "$sshd_config.XXXXXX")
sed "/^$CONFIG_BEGIN\$/,/^$CONFIG_END\$/d" "$sshd_config" >"$new_config"
cat >>"$new_config" <<EOF
$CONFIG_BEGIN
Match User root
  PermitRootLogin no
Match User $user
  AuthorizedKeysFile $KEYS_DIR/%u
$CONFIG_END
EOF
chmod 0644 "$new_config"
ssh-keygen -A
# sshd -t needs its privilege separation directory, which Debian's and Ubuntu's ssh.service make at its start.
mkdir -p "${GPUFLEET_ROOT:-}/run/sshd"
if ! sshd -t -f "$new_config"; then
  rm -f "$new_config"
  die "sshd refuses its configuration with gpufleet's block (sshd -t above): $SSHD_CONFIG left as it was"
fi
mv -f "$new_config" "$sshd_config"
log "$user logs in with its key from $subnet ($KEYS_DIR/$user), where host keys are not checked; root logs in by no key"

# sshd may have failed before this step: an image whose host keys the build deleted, on a base image that does not
# make new ones at boot, fails sshd's start until the keys exist, and systemd stops trying after five failures in ten
# seconds ("Start request repeated too quickly", systemd.unit(5) StartLimitBurst=/StartLimitIntervalSec= defaults);
# reset-failed clears that count. Debian and Ubuntu name the unit ssh.service (sshd.service is its alias). A running
# sshd reads its configuration again on reload (SIGHUP: sshd(8)).
for unit in sshd.service ssh.service; do
  systemctl reset-failed "$unit" 2>/dev/null || true
done
systemctl reload-or-restart sshd.service 2>/dev/null || systemctl reload-or-restart ssh.service ||
  die "cannot start sshd"
