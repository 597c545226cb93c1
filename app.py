#!/usr/bin/env python3
"""The gpufleet CDK app: the stacks of every environment in environments/, or of the one named by `-c env=NAME`.
Without `-c env=NAME` it also holds the AMI pipeline stack (gpufleet-ami-pipeline, from ami/pipeline.yaml), in the
account ami/pipeline.yaml names or, without one, the account the CDK CLI deploys to (CDK_DEFAULT_ACCOUNT, which the
CLI sets from the caller's credentials); where neither is known (a synthesis without credentials) the stack is left
out, with one line saying so.

Environments are validated first; any error stops synthesis with the same messages as `gpufleet validate`. Warnings
(a fleet.valid_until that has passed, a Capacity Block that has ended) do not: `cdk destroy` synthesizes first, and a
cluster must stay possible to tear down. `gpufleet preflight` is where they stop a launch. An eks Capacity Block node
group's desired size depends on the time of synthesis (gpufleet.block_schedule); the fleet flavour's block schedule
is made at deploy time.
"""

import datetime as dt
import os
import sys

import aws_cdk as cdk

from gpufleet.ami.pipeline import account_mismatch, pipeline_account
from gpufleet.errors import GpufleetError
from gpufleet.loading import environment_files, load_environments, load_named_environment, load_pipeline
from stacks.ami_pipeline_stack import add_ami_pipeline_stack
from stacks.environment_stacks import add_compliance_checks, add_environment_stacks


def main() -> int:
    app = cdk.App()
    selected = app.node.try_get_context("env")
    try:
        # Environments are checked against the pipeline that publishes their images; the pipeline publishes in the
        # regions of the environments (gpufleet.ami.pipeline.publish_regions).
        ami_pipeline = load_pipeline()
        if selected:
            environments = [load_named_environment(selected, ami_pipeline)]
        else:
            environments = load_environments(environment_files(), ami_pipeline)
        add_compliance_checks(app)
        now = dt.datetime.now(dt.UTC)
        for environment in environments:
            add_environment_stacks(app, environment, now)
        if not selected:
            deploying = os.environ.get("CDK_DEFAULT_ACCOUNT") or None
            account = pipeline_account(ami_pipeline, deploying)
            if (mismatch := account_mismatch(ami_pipeline, deploying)) is not None:
                print(f"warning: {mismatch}", file=sys.stderr)
            if account is None:
                print(
                    "note: gpufleet-ami-pipeline left out: ami/pipeline.yaml names no account and the CDK CLI found "
                    "none (no credentials: CDK_DEFAULT_ACCOUNT unset); run cdk with the credentials of the account to "
                    "build the images in",
                    file=sys.stderr,
                )
            else:
                add_ami_pipeline_stack(app, ami_pipeline, environments, account)
    except GpufleetError as error:
        print("\n".join(error.problems), file=sys.stderr)
        return 1
    try:
        app.synth()
    except RuntimeError as error:
        # cdk-nag findings: the report is the message; a traceback would only hide it.
        if not str(error).startswith("ValidationFailed"):
            raise
        print(str(error).removeprefix("ValidationFailed: "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
