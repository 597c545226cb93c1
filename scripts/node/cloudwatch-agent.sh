#!/usr/bin/env bash
# Starts the CloudWatch agent with the environment's configuration, which the user data writes to
# /etc/gpufleet/cloudwatch-agent.json (gpufleet/monitoring.py): the gpufleet units' journals and the kernel's GPU Xid
# lines to the environment's log group, GPU and EFA metrics to its namespace. The node's market (IMDSv2
# meta-data/instance-life-cycle: "spot", "on-demand", ...; EC2 user guide, instancedata-data-categories) replaces
# @MARKET@ in it, so the dashboard counts nodes by market. Every AMI profile installs the agent, not started
# (scripts/ami/15-cloudwatch-agent.sh); fetch-config replaces the agent's configuration and -s (re)starts it
# (amazon-cloudwatch-agent-ctl's usage: `-a fetch-config -m ec2 -c file:<file-path> -s`), so a second run at the next
# boot does the same again. It fails, saying why, on an image without the agent or without IMDS.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly CONFIG=/etc/gpufleet/cloudwatch-agent.json
readonly AGENT_CTL=/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl
# The agent's own configuration directory, which fetch-config reads the file from.
readonly AGENT_CONFIG=/opt/aws/amazon-cloudwatch-agent/etc/gpufleet.json
root=${GPUFLEET_ROOT:-}

[[ -r $root$CONFIG ]] || die "no agent configuration at $CONFIG (the user data writes it): run the user data again"
[[ -x $root$AGENT_CTL ]] ||
  die "no CloudWatch agent on this image ($AGENT_CTL): use an image of a gpufleet AMI profile, which installs it"
token=$(imds_token) || die "cannot get an IMDSv2 token from $IMDS_URL"
response=$(curl -sS --max-time 2 -H "X-aws-ec2-metadata-token: $token" -w '\n%{http_code}' \
  "$IMDS_URL/latest/meta-data/instance-life-cycle") || die "cannot reach $IMDS_URL"
[[ ${response##*$'\n'} == 200 ]] ||
  die "IMDS answered meta-data/instance-life-cycle with HTTP ${response##*$'\n'}"
market=${response%$'\n'*}
[[ $market =~ ^[a-z-]{1,32}$ ]] || die "meta-data/instance-life-cycle is '$market', not a market name"

mkdir -p "$(dirname "$root$AGENT_CONFIG")"
sed "s/@MARKET@/$market/g" "$root$CONFIG" >"$root$AGENT_CONFIG.tmp"
mv -f "$root$AGENT_CONFIG.tmp" "$root$AGENT_CONFIG"
"$root$AGENT_CTL" -a fetch-config -m ec2 -c "file:$AGENT_CONFIG" -s ||
  die "amazon-cloudwatch-agent-ctl could not start the agent with $AGENT_CONFIG (its output is above)"
log "agent started with $AGENT_CONFIG (market $market)"
