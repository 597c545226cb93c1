"""The vocabulary of destinations: every AWS service name is one aws-cdk-lib knows as an interface endpoint service,
and the validation takes exactly the three forms."""

from __future__ import annotations

import pytest
from aws_cdk import aws_ec2 as ec2

from gpufleet.reachability.destinations import AWS_SERVICES, S3_GLOBAL, destination_problem


def cdk_interface_service_names() -> set[str]:
    """The short names of aws-cdk-lib's InterfaceVpcEndpointAwsService constants (each the <name> of
    com.amazonaws.<region>.<name>)."""
    services = (getattr(ec2.InterfaceVpcEndpointAwsService, name) for name in dir(ec2.InterfaceVpcEndpointAwsService))
    return {service.short_name for service in services if isinstance(service, ec2.InterfaceVpcEndpointAwsService)}


def test_every_aws_service_is_an_interface_endpoint_service_aws_cdk_lib_names():
    assert sorted(AWS_SERVICES - cdk_interface_service_names()) == []


@pytest.mark.parametrize(
    "name", sorted(AWS_SERVICES) + [S3_GLOBAL, "https://pypi.org", "https://files.pythonhosted.org"]
)
def test_the_vocabulary_passes(name):
    assert destination_problem(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "S3",
        "s3.amazonaws.com",
        "com.amazonaws.us-east-1.s3",
        "iam",
        "https://pypi.org/",
        "https://pypi.org:443",
        "https://PyPI.org",
        "https://pypi",
        "https://-pypi.org",
        "http://pypi.org",
        "https://",
        "",
    ],
)
def test_anything_else_is_refused(name):
    assert destination_problem(name) is not None
