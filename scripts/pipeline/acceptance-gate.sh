#!/usr/bin/env bash
# The acceptance gate, between build-image.sh and publish-image.sh (docs/guides/ami-pipeline.md, "Acceptance gate"):
# deploys the new image as a short-lived environment with the project's own CDK app, runs `gpufleet acceptance` on
# it, and deletes it on every way out of this script. Exits 0 only when every check passed; publish-image.sh runs
# only then (a failed command ends CodeBuild's build phase).
#  1. the on-demand price of the test nodes (Price List API), and `gpufleet ami acceptance-environment`, which
#     writes the environment file and refuses, before any launch, a gate whose nodes could cost more than
#     acceptance.max_cost_usd;
#  2. the deploy, with no CDK bootstrap role: `cdk synth` of the environment (no AWS call), the staging of its one
#     template and assets (gpufleet/commands/ami_acceptance.py stage_gate_stack: assets moved to the gate's bucket,
#     every name gpufleet-accept-..., every role bounded by the gate's boundary), their upload to
#     s3://GPUFLEET_GATE_ASSETS_BUCKET/NAME/ and CloudFormation CreateStack with the gate's execution role, the only
#     role the build may pass (stacks/constructs/ami_acceptance_gate.py); then a wait until GPUFLEET_ACCEPTANCE_NODES
#     nodes say they are ready (the stack is complete once its Auto Scaling group exists; each node then boots and
#     tags itself ready: scripts/node/node-ready.sh), and `gpufleet acceptance`, together limited to
#     GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS (`timeout` signals its whole process group: coreutils timeout(1));
#  3. acceptance-teardown.sh from the EXIT trap (also after SIGTERM or SIGINT). A build that is stopped or times out
#     may end this script without it: the buildspec's finally runs the teardown again, and the stack's backstop rule
#     starts it in a teardown build once the build has ended, whatever its status.
# Settings: GPUFLEET_PACKER_MANIFEST, CODEBUILD_BUILD_ARN, AWS_REGION, GPUFLEET_ACCEPTANCE_INSTANCE_TYPE,
# GPUFLEET_ACCEPTANCE_NODES, GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS, GPUFLEET_GATE_EXECUTION_ROLE_ARN,
# GPUFLEET_GATE_ASSETS_BUCKET, GPUFLEET_GATE_BOUNDARY_ARN, GPUFLEET_VENV (default .venv).
set -euo pipefail
# shellcheck source=../lib/helpers.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/helpers.sh"
# shellcheck source=../lib/pipeline.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/pipeline.sh"
here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"

require_settings "$PIPELINE_SETTINGS" GPUFLEET_PACKER_MANIFEST CODEBUILD_BUILD_ARN AWS_REGION \
  GPUFLEET_ACCEPTANCE_INSTANCE_TYPE GPUFLEET_ACCEPTANCE_NODES GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS \
  GPUFLEET_GATE_EXECUTION_ROLE_ARN GPUFLEET_GATE_ASSETS_BUCKET GPUFLEET_GATE_BOUNDARY_ARN
cd "$here/../.."
venv="$(readlink -f "${GPUFLEET_VENV:-.venv}")"
work="$PWD/build/acceptance"
image="$(packer_image "$GPUFLEET_PACKER_MANIFEST")"
name="$(acceptance_environment_name "$CODEBUILD_BUILD_ARN")"
mkdir -p "$work"

# The filters of gpufleet/ops/cost.py ON_DEMAND_FILTERS (one Linux, shared-tenancy, on-demand product), plus the type
# and region; the Price List Query API answers in us-east-1 (cost.py PRICING_REGION says where that comes from).
aws pricing get-products --region us-east-1 --service-code AmazonEC2 --format-version aws_v1 --output json \
  --filters "Type=TERM_MATCH,Field=instanceType,Value=$GPUFLEET_ACCEPTANCE_INSTANCE_TYPE" \
  "Type=TERM_MATCH,Field=regionCode,Value=$AWS_REGION" "Type=TERM_MATCH,Field=operatingSystem,Value=Linux" \
  "Type=TERM_MATCH,Field=tenancy,Value=Shared" "Type=TERM_MATCH,Field=preInstalledSw,Value=NA" \
  "Type=TERM_MATCH,Field=capacitystatus,Value=Used" >"$work/price-list.json"
# The build's own account, where the pipeline stack and so the gate live: the fifth field of its ARN
# (arn:aws:codebuild:REGION:ACCOUNT:build/PROJECT:UUID).
account="$(cut -d: -f5 <<<"$CODEBUILD_BUILD_ARN")"
"$venv/bin/gpufleet" ami acceptance-environment --name "$name" --image "$image" --account "$account" \
  --price-list "$work/price-list.json" --out "$work/environments"

# The CDK CLI pinned in package.json (package-lock.json): only `cdk synth` runs, which reads nothing from AWS.
npm ci --no-fund --no-audit --loglevel=error
export PATH="$PWD/node_modules/.bin:$PATH"
export GPUFLEET_ENVIRONMENTS_DIR="$work/environments"

finish() {
  local status=$?
  trap - EXIT
  if ! bash "$here/acceptance-teardown.sh"; then
    error "the teardown of $name failed: not publishing (the backstop teardown runs when this build ends)"
    status=1
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

log "deploying $name: $GPUFLEET_ACCEPTANCE_NODES x $GPUFLEET_ACCEPTANCE_INSTANCE_TYPE of $image," \
  "${GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS}s until the verdict"
verdict=0
# shellcheck disable=SC2016 # the inner bash expands its own arguments
timeout --kill-after=60 "$GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS" bash -c '
  set -euo pipefail
  venv=$1 name=$2 work=$3 nodes=$4
  stack="gpufleet-$name-cluster" bucket=$GPUFLEET_GATE_ASSETS_BUCKET
  cdk synth --app "$venv/bin/python app.py" -c "env=$name" --output "$work/cdk.out" --quiet
  "$venv/bin/python" -m gpufleet.commands.ami_acceptance --cdk-out "$work/cdk.out" --name "$name" \
    --bucket "$bucket" --boundary "$GPUFLEET_GATE_BOUNDARY_ARN" --out "$work/stack"
  aws s3 cp "$work/stack" "s3://$bucket/$name" --recursive --only-show-errors --region "$AWS_REGION"
  # Named IAM roles (the staging names them): CAPABILITY_NAMED_IAM (CloudFormation API reference, CreateStack).
  aws cloudformation create-stack --region "$AWS_REGION" --stack-name "$stack" \
    --template-url "https://$bucket.s3.$AWS_REGION.amazonaws.com/$name/template.json" \
    --role-arn "$GPUFLEET_GATE_EXECUTION_ROLE_ARN" --capabilities CAPABILITY_NAMED_IAM --output text
  aws cloudformation wait stack-create-complete --region "$AWS_REGION" --stack-name "$stack"
  ready_nodes() {
    "$venv/bin/gpufleet" status "$name" --json |
      python3 -c "import json, sys; print(sum(i[\"readiness\"] == \"ready\" for i in json.load(sys.stdin)[\"instances\"]))"
  }
  until (($(ready_nodes || echo 0) >= nodes)); do sleep 30; done
  "$venv/bin/gpufleet" acceptance "$name" --report-dir "$work/report" --min-nodes "$nodes"
' gate "$venv" "$name" "$work" "$GPUFLEET_ACCEPTANCE_NODES" || verdict=$?
case $verdict in
  0) log "$image passed the acceptance test on $name (report: $work/report)" ;;
  124 | 137) die "the deploy and acceptance test of $image did not finish in ${GPUFLEET_ACCEPTANCE_TIMEOUT_SECONDS}s" ;;
  3) die "$image failed the acceptance test (the lines above name each node and check)" ;;
  *) die "the acceptance test of $image could not run (exit $verdict; see above)" ;;
esac
