#!/usr/bin/env bash
# Deletes the acceptance gate's stack of one AMI build, gpufleet-NAME-cluster (NAME: acceptance_environment_name of
# scripts/lib/pipeline.sh), and waits until CloudFormation has deleted it, its Auto Scaling group's instances included.
# A stack that does not exist is nothing to do, so every path may run it: the gate's EXIT trap, the build phase's
# finally, and the backstop teardown build that the stack's rule starts when an AMI build ends (with the ended build's
# ARN in GPUFLEET_GATE_BUILD_ARN).
# It deletes through CloudFormation (the backstop has neither the environment file nor the image id, only the build's
# ARN), with the build's own credentials, naming the gate's execution role: the build and teardown roles may delete
# only stacks named gpufleet-accept-* and only through that role (stacks/constructs/ami_acceptance_gate.py), which
# may delete only what such a stack creates. No CDK bootstrap role is used.
# Settings: GPUFLEET_GATE_BUILD_ARN (the build whose stack to delete; default CODEBUILD_BUILD_ARN, this build),
# GPUFLEET_GATE_EXECUTION_ROLE_ARN, AWS_REGION.
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
# shellcheck source=../lib/pipeline.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/pipeline.sh"

GPUFLEET_GATE_BUILD_ARN=${GPUFLEET_GATE_BUILD_ARN:-${CODEBUILD_BUILD_ARN:-}}
require_settings "$PIPELINE_SETTINGS" GPUFLEET_GATE_BUILD_ARN GPUFLEET_GATE_EXECUTION_ROLE_ARN AWS_REGION
# source (format): https://docs.aws.amazon.com/codebuild/latest/userguide/sample-build-notifications.html, detail
# build-id "arn:aws:codebuild:REGION:ACCOUNT:build/PROJECT:UUID"
[[ "$GPUFLEET_GATE_BUILD_ARN" =~ ^arn:aws[a-z-]*:codebuild:[a-z0-9-]+:[0-9]{12}:build/[^:]+:[0-9a-f-]{36}$ ]] ||
  die "'$GPUFLEET_GATE_BUILD_ARN' is not a CodeBuild build ARN (arn:aws:codebuild:REGION:ACCOUNT:build/PROJECT:UUID)"
name="$(acceptance_environment_name "$GPUFLEET_GATE_BUILD_ARN")"
stack="gpufleet-$name-cluster"

if ! found="$(aws cloudformation describe-stacks --region "$AWS_REGION" --stack-name "$stack" \
  --query 'Stacks[0].StackStatus' --output text 2>&1)"; then
  # DescribeStacks answers ValidationError "Stack with id NAME does not exist" for a stack that is not there (or
  # deleted); any other error is one to report.
  [[ "$found" == *"does not exist"* ]] || die "cannot read $stack: $found"
  log "$stack does not exist: nothing to delete"
  exit 0
fi
log "deleting $stack ($found)"
aws cloudformation delete-stack --region "$AWS_REGION" --stack-name "$stack" \
  --role-arn "$GPUFLEET_GATE_EXECUTION_ROLE_ARN" || die "cannot delete $stack"
# The waiter polls every 30 s, 120 times (botocore cloudformation waiters-2.json, StackDeleteComplete) and fails on
# DELETE_FAILED.
aws cloudformation wait stack-delete-complete --region "$AWS_REGION" --stack-name "$stack" ||
  die "$stack is not deleted (see its events in CloudFormation); its nodes may still be running"
log "$stack deleted"
