"""What a resource's code calls, declared beside the construct that adds the resource, so that the reachability
check (gpufleet reachability, run by `make synth` and the tests) can ask whether every call has a route.

    declare_calls(function, "eks", "s3", "https://pypi.org", source="the kubectl handler: helm pull, kubectl")

records on the resource's CloudFormation Metadata, under "gpufleet:calls", each destination with the sources that
call it: {"eks": ["the kubectl handler: ..."], ...}. Declarations add up: each construct that makes the resource's
code call something (a user-data step of a launch template, a handler's client) declares its own.

Destinations are the names of gpufleet/reachability/destinations.py: an AWS service's PrivateLink service name
("s3", "ec2", "ssm", "ssmmessages", "ec2messages", "logs", "monitoring", "secretsmanager", "sts", "eks", "eks-auth",
"lambda", "ecr.api", "ecr.dkr", "autoscaling", "cloudformation", ...), "s3-global" for S3 called without a region,
or "https://HOST" for a host outside AWS. A name outside that vocabulary fails synthesis.

Which resources to declare: every one that runs code in a VPC: a Lambda function with a VpcConfig (including the
functions aws-cdk-lib adds for a custom_resources.Provider or aws-eks-v2's kubectl provider: declare them from the
construct that creates the provider), a CodeBuild project with a VpcConfig, a launch template (what the user data
and the node scripts call), an EKS node group. The check reports an undeclared one. A resource whose code calls
nothing outside the VPC declares no destination, with the source saying so.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

from gpufleet.reachability.destinations import CALLS_METADATA_KEY, destination_problem


def declare_calls(caller: IConstruct, *destinations: str, source: str) -> None:
    """Add DESTINATIONS, called by SOURCE (the code that calls them, in words a reader can find: a script, a
    handler's client), to what CALLER's CloudFormation resource calls. CALLER is a CfnResource or a construct whose
    default child is one (a lambda_.Function, an ec2.LaunchTemplate)."""
    resource = caller if isinstance(caller, cdk.CfnResource) else caller.node.default_child
    if not isinstance(resource, cdk.CfnResource):
        raise TypeError(f"{caller.node.path}: neither a CfnResource nor a construct whose default child is one")
    if not source.strip():
        raise ValueError(f"{caller.node.path}: say which code makes the calls (source)")
    problems = [problem for destination in destinations if (problem := destination_problem(destination))]
    if problems:
        raise ValueError(f"{caller.node.path}: " + "; ".join(problems))
    declared: dict[str, list[str]] = {
        destination: list(sources) for destination, sources in (resource.get_metadata(CALLS_METADATA_KEY) or {}).items()
    }
    for destination in destinations:
        sources = declared.setdefault(destination, [])
        if source not in sources:
            sources.append(source)
    resource.add_metadata(CALLS_METADATA_KEY, {name: sorted(declared[name]) for name in sorted(declared)})
