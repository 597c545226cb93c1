"""The reachability check (gpufleet reachability) over the syntheses the suite shares: every shipped environment,
the environment matrix, the auto-scaling environments and the AMI pipeline; and over a small stack that reproduces
issue 30's D1 as aws-cdk-lib wrote it (a function in subnets whose route tables have no route)."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_

from gpufleet.commands.reachability import assembly_findings, assembly_stacks
from gpufleet.loading import environment_files, load_environments
from gpufleet.ops.reachability_preflight import KUBECTL_CALLS, NEW_GROUP_EGRESS, kubectl_runs
from gpufleet.reachability.rules import Findings
from gpufleet.reachability.templates import read_assembly
from stacks.constructs.calls import declare_calls
from tests.conftest import CDK_CONTEXT, Assembly


def not_checked(stack: str, subnet: str) -> str:
    return (
        f"launch template NodeLaunchTemplateCABE86F2 in {stack}: not checked here (its subnet {subnet} is not "
        "described here): gpufleet preflight checks it"
    )


def test_every_call_of_the_shipped_environments_has_a_route(assembly):
    assert assembly_findings(assembly.directory) == Findings(
        problems=[],
        # h100 places its nodes in an existing VPC.
        not_checked=[not_checked("gpufleet-h100-cluster", "subnet-0f1e2d3c4b5a69788")],
    )


def test_every_call_of_the_matrix_has_a_route(matrix_assembly):
    assert assembly_findings(matrix_assembly.directory) == Findings(
        problems=[],
        # eks-g5 places its nodes in an existing VPC too.
        not_checked=[
            "node group ClusterNodegroupSystemNodes9C3907F1 in gpufleet-eks-g5-eks: not checked here (its subnet "
            "subnet-0a1b2c3d is not described here): gpufleet preflight checks it",
            "node group OnDemandGpuNodesF069967E in gpufleet-eks-g5-gpu-nodes: not checked here (its subnet "
            "subnet-0a1b2c3d is not described here): gpufleet preflight checks it",
            not_checked("gpufleet-request-p4de-cluster", "subnet-0a1b2c3d"),
        ],
    )


def test_every_call_of_the_auto_scaling_environments_has_a_route(auto_scaling_assembly):
    assert assembly_findings(auto_scaling_assembly.directory) == Findings(
        problems=[], not_checked=[not_checked("gpufleet-asgp5-cluster", "subnet-0a1b2c3d")]
    )


def test_the_ami_pipeline_runs_nothing_in_a_vpc(ami_pipeline_assembly):
    """Its CodeBuild projects and functions run outside any VPC (the Packer build instance, which Packer launches
    into ami/pipeline.yaml's subnet, is no resource of the template)."""
    assert assembly_findings(ami_pipeline_assembly.directory) == Findings(problems=[], not_checked=[])


def test_the_nodes_launch_template_declares_what_the_nodes_call(assembly):
    metadata = assembly.template_json("gpufleet-p5-block-cluster")["Resources"]["NodeLaunchTemplateCABE86F2"]
    assert sorted(metadata["Metadata"]["gpufleet:calls"]) == [
        "autoscaling",
        "ec2",
        "ec2messages",
        "logs",
        "monitoring",
        "s3",
        "secretsmanager",
        "ssm",
        "ssmmessages",
    ]


def d1_assembly(directory) -> Assembly:
    """Issue 30's D1: the kubectl handler in the control-plane subnets, whose route tables have no route; the S3
    gateway endpoint on the node subnet's table only; no interface endpoint of EKS, Lambda or STS."""
    app = cdk.App(outdir=str(directory), context=CDK_CONTEXT)
    stack = cdk.Stack(app, "D1", env=cdk.Environment(account="123456789012", region="us-west-2"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        ip_addresses=ec2.IpAddresses.cidr("10.50.0.0/16"),
        availability_zones=["us-west-2d"],
        nat_gateways=0,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="nodes", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=17)
        ],
    )
    vpc.add_gateway_endpoint(
        "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[ec2.SubnetSelection(subnet_group_name="nodes")]
    )
    control_plane = ec2.Subnet(
        stack, "ControlPlaneSubnet", vpc_id=vpc.vpc_id, availability_zone="us-west-2a", cidr_block="10.50.255.224/28"
    )
    handler = lambda_.Function(
        stack,
        "Handler",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
        vpc=vpc,
        vpc_subnets=ec2.SubnetSelection(subnets=[control_plane]),
    )
    declare_calls(handler, "eks", "s3", "lambda", "sts", source="the kubectl handler")
    app.synth()
    return Assembly(directory)


def test_the_check_catches_d1(tmp_path):
    findings = assembly_findings(d1_assembly(tmp_path).directory)
    no_way_out = "its route table ControlPlaneSubnetRouteTable0B9B405F in D1 has no route to a NAT or internet gateway"
    reason = {
        "eks": "no eks interface endpoint in the VPC Vpc8378EB38 in D1; " + no_way_out,
        "lambda": "no lambda interface endpoint in the VPC Vpc8378EB38 in D1; " + no_way_out,
        "s3": "no s3 gateway endpoint on its route table ControlPlaneSubnetRouteTable0B9B405F in D1; no s3 interface "
        "endpoint in the VPC Vpc8378EB38 in D1; " + no_way_out,
        "sts": "no sts interface endpoint in the VPC Vpc8378EB38 in D1; " + no_way_out,
    }
    assert findings == Findings(
        problems=[
            f"Lambda function Handler886CB40B in D1 cannot reach {service} from ControlPlaneSubnet86156145 in D1: "
            + why
            for service, why in sorted(reason.items())
        ],
        not_checked=[],
    )
    template = json.loads((tmp_path / "D1.template.json").read_text())
    assert template["Resources"]["Handler886CB40B"]["Metadata"]["gpufleet:calls"]["eks"] == ["the kubectl handler"]


def test_preflight_takes_the_callers_new_groups_as_the_stacks_make_them(assembly):
    """gpufleet preflight cannot describe the security groups the deploy will make: it takes their way out as
    NEW_GROUP_EGRESS, which is what the synthesized nodes' and kubectl handler's groups let out (their rules to other
    groups aside)."""
    network, _ = read_assembly(assembly_stacks(assembly.directory))
    for group in (
        "gpufleet-dev-cluster/EfaSecurityGroup84B158D9",
        "gpufleet-p5-eks-eks/EfaSecurityGroup84B158D9",
        "gpufleet-p5-eks-eks/KubectlSecurityGroupF060FCAE",
    ):
        assert tuple(rule for rule in network.security_groups[group].egress if rule.group is None) == NEW_GROUP_EGRESS


def kubectl_functions(template: dict) -> list[dict]:
    return [
        resource
        for logical_id, resource in template["Resources"].items()
        if logical_id.startswith("ClusterKubectlProvider") and resource["Type"] == "AWS::Lambda::Function"
    ]


def test_preflight_asks_what_the_kubectl_handler_declares(assembly, matrix, matrix_assembly):
    """For every eks environment: a kubectl handler exactly where preflight expects one (kubectl_runs), and the AWS
    services it and its Provider framework declare are KUBECTL_CALLS."""
    shipped = {env.name: env for env in load_environments(environment_files())}
    eks = [(shipped["p5-eks"], assembly)] + [(env, matrix_assembly) for env in matrix.values() if env.eks is not None]
    for env, synthesized in eks:
        functions = kubectl_functions(synthesized.template_json(f"gpufleet-{env.name}-eks"))
        assert bool(functions) == kubectl_runs(env), env.name
        declared = {
            name
            for function in functions
            for name in function["Metadata"]["gpufleet:calls"]
            if not name.startswith("https://")
        }
        assert declared == (set(KUBECTL_CALLS) if functions else set()), env.name
