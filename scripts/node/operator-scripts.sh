#!/usr/bin/env bash
# Installs the operator scripts of scripts/ops (node-health-check.sh, which node-ready.sh runs at boot,
# run-nccl-tests.sh, the run scripts start-run.sh and stop-run.sh, which Run Command and join-runs.sh call, and the
# default checkpoint hook save-checkpoint.sh) under /opt/gpufleet/ops, from the archive the cluster stack publishes as
# a CDK file asset in the CDK bootstrap bucket (stacks/constructs/operator_scripts.py). Every script a node needs only
# after boot is there, so that the user data keeps its room under EC2's 16 KB limit. Runs at every boot, so a node
# always has the archive its launch template names; files are replaced, never edited in place (tar unlinks before it
# writes), so a running check keeps its own copy.
# The download is checked against the archive's SHA-256, which the user data carries, before anything is installed:
# a node never runs scripts other than the ones synthesized with its launch template.
# Reading it needs the AWS CLI, the node role's s3:GetObject on that one object, and S3 reachable from the node subnet
# (the network stack's S3 gateway endpoint, or a NAT gateway); the region comes from IMDSv2 (placement/region).
# Required: GPUFLEET_OPERATOR_SCRIPTS (s3://BUCKET/KEY), GPUFLEET_OPERATOR_SCRIPTS_SHA256.
# Optional: GPUFLEET_IMDS_URL, GPUFLEET_ROOT (tests).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"

readonly OPS_DIR=/opt/gpufleet/ops

require_settings "$NODE_SETTINGS" GPUFLEET_OPERATOR_SCRIPTS GPUFLEET_OPERATOR_SCRIPTS_SHA256
url=$GPUFLEET_OPERATOR_SCRIPTS
sha256=$GPUFLEET_OPERATOR_SCRIPTS_SHA256
[[ $url =~ ^s3://[a-z0-9.-]+/[^[:space:]]+$ ]] || die "GPUFLEET_OPERATOR_SCRIPTS must be s3://BUCKET/KEY, got '$url'"
[[ $sha256 =~ ^[0-9a-f]{64}$ ]] || die "GPUFLEET_OPERATOR_SCRIPTS_SHA256 must be 64 hex digits, got '$sha256'"
target=${GPUFLEET_ROOT:-}$OPS_DIR

command -v aws >/dev/null || die "no AWS CLI on this node (aws is not on PATH) to fetch the operator scripts from $url"
token=$(imds_token) || die "no IMDSv2 token from $IMDS_URL"
region=$(imds_get "$token" placement/region) || die "cannot read the region from $IMDS_URL"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Standard retries (the AWS CLI's default mode) with more attempts: a boot may come before the network settles.
AWS_RETRY_MODE=standard AWS_MAX_ATTEMPTS=6 aws s3 cp --only-show-errors --region "$region" "$url" "$work/ops.tar.gz" ||
  die "cannot fetch the operator scripts from $url (see the AWS CLI's message above)"
sha256sum --status -c - <<<"$sha256  $work/ops.tar.gz" ||
  die "$url is not the archive this node expects: its SHA-256 is not $sha256"
mkdir -p "$target"
tar -xzf "$work/ops.tar.gz" -C "$target" --no-same-owner
log "installed $(tar -tzf "$work/ops.tar.gz" | paste -sd ' ' -) under $OPS_DIR"
