"""What code inside a VPC may call, named once for the whole project: the stacks declare a caller's destinations with
these names (stacks/constructs/calls.py writes them into the template), and the reachability rules read them back.

A destination is one of:
- an AWS service's regional endpoint, named as AWS PrivateLink names its endpoint service, com.amazonaws.<region>.
  <name> ("s3", "ssm", "ecr.dkr", ...): the SDKs and the AWS CLI call https://<name's host>.<region>.amazonaws.com
  when given a region;
- S3_GLOBAL: S3 called without a region, which goes to the global endpoint s3.amazonaws.com (the rules say where that
  is reachable);
- an outside host, "https://HOST" (a package index, a chart repository), reachable only through a NAT or internet
  gateway.
"""

from __future__ import annotations

import re

# The Metadata key of a CloudFormation resource that lists what its code calls: {destination: [source, ...]}.
CALLS_METADATA_KEY = "gpufleet:calls"

S3_GLOBAL = "s3-global"
OUTSIDE_SCHEME = "https://"

# The AWS services gpufleet's code calls from inside a VPC, by the service name of their interface endpoint. Each is
# listed, as com.amazonaws.<region>.<name>, on "AWS services that integrate with AWS PrivateLink"
# (https://docs.aws.amazon.com/vpc/latest/privatelink/aws-services-privatelink-support.html); s3 and dynamodb also
# have gateway endpoints (https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html). Add a service
# here, with no other change, when code starts calling it; the test holds every name against aws-cdk-lib's
# InterfaceVpcEndpointAwsService, which carries the same names.
AWS_SERVICES = frozenset(
    {
        "autoscaling",
        "cloudformation",
        "dynamodb",
        "ec2",
        "ec2messages",
        "ecr.api",
        "ecr.dkr",
        "eks",
        "eks-auth",
        "elasticfilesystem",
        "events",
        "fsx",
        "kms",
        "lambda",
        "logs",
        "monitoring",
        "s3",
        "secretsmanager",
        "sns",
        "sqs",
        "ssm",
        "ssmmessages",
        "states",
        "sts",
    }
)

# A DNS name of letters, digits and hyphens in dot-separated labels (RFC 1123 section 2.1), with at least one dot: a
# bare name would resolve through the search domains of wherever the code runs.
_HOST = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?")


def is_outside(destination: str) -> bool:
    return destination.startswith(OUTSIDE_SCHEME)


def destination_problem(destination: str) -> str | None:
    """Why DESTINATION is not a name of the vocabulary, or None."""
    if destination in AWS_SERVICES or destination == S3_GLOBAL:
        return None
    if is_outside(destination):
        host = destination.removeprefix(OUTSIDE_SCHEME)
        if _HOST.fullmatch(host):
            return None
        return f"{destination!r} is no outside host: write https://HOST, a lower-case DNS name with no port or path"
    return (
        f"{destination!r} is no destination: name an AWS service as its PrivateLink service name (one of "
        f"{', '.join(sorted(AWS_SERVICES))}; add a new one to AWS_SERVICES in gpufleet/reachability/destinations.py), "
        f"{S3_GLOBAL!r} for S3 without a region, or https://HOST"
    )
