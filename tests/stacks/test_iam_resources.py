"""Every resource of every IAM policy statement in every template that app.py synthesizes (each environment's
network and cluster stacks, the fleet-teardown Lambda role, the AMI pipeline), matched against the IAM Service
Authorization Reference that parliament bundles (parliament/iam_definition.json, read offline):

- a resource that no action of its statement can match is a policy that silently denies what it was written for
  (an EC2 snapshot ARN with an account, say: snapshot ARNs have none, arn:${Partition}:ec2:${Region}::snapshot/...);
- an action none of whose resource types (nor "*") the statement's resource matches is an action that does nothing.

CloudFormation intrinsics in ARNs are resolved first to concrete placeholder values (resolve_arn).
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass

import pytest

with warnings.catch_warnings():
    # parliament 1.6.4 reads its bundled data through pkg_resources, which warns that it is deprecated.
    warnings.simplefilter("ignore", UserWarning)
    from parliament import expand_action, is_arn_match
    from parliament.statement import get_arn_format, get_privilege_info

PARTITION = "aws"
# Ref AWS::URLSuffix in the aws partition.
URL_SUFFIX = "amazonaws.com"
# Fn::GetAtt <resource> Arn, by resource type: the ARN forms of CloudFormation's return values (aws-cdk-lib's
# Cfn<Resource>.attr_arn docstrings quote them; a log group's ends in ":*"). A type not listed here fails the
# resolver, so a new one gets its form added here rather than matched by accident.
GETATT_ARN_FORMS = {
    "AWS::IAM::Role": "arn:{partition}:iam::{account}:role/{name}",
    "AWS::IAM::InstanceProfile": "arn:{partition}:iam::{account}:instance-profile/{name}",
    "AWS::KMS::Key": "arn:{partition}:kms:{region}:{account}:key/{name}",
    "AWS::Logs::LogGroup": "arn:{partition}:logs:{region}:{account}:log-group:{name}:*",
    "AWS::CodeBuild::Project": "arn:{partition}:codebuild:{region}:{account}:project/{name}",
    "AWS::Lambda::Function": "arn:{partition}:lambda:{region}:{account}:function:{name}",
    "AWS::SQS::Queue": "arn:{partition}:sqs:{region}:{account}:{name}",
    "AWS::SNS::Topic": "arn:{partition}:sns:{region}:{account}:{name}",
    "AWS::S3::Bucket": "arn:{partition}:s3:::{name}",
    # The cluster resource type of Amazon EKS in parliament's Service Authorization Reference (iam_definition.json:
    # arn:${Partition}:eks:${Region}:${Account}:cluster/${ClusterName}).
    "AWS::EKS::Cluster": "arn:{partition}:eks:{region}:{account}:cluster/{name}",
}
# Ref <resource>, for the types whose Ref returns their ARN rather than a name: a state machine's (CloudFormation's
# AWS::StepFunctions::StateMachine return values; aws-cdk-lib 2.275's custom_resources waiter takes its
# stateMachineArn from the resource's ref) and a secret's (AWS::SecretsManager::Secret return values: "Ref returns
# the ARN of the secret"; aws-cdk-lib 2.275's Secret takes its secretArn from the resource's ref; the ARN form is the
# Service Authorization Reference's Secret resource type). Other Refs stay placeholder names.
REF_ARN_FORMS = {
    "AWS::StepFunctions::StateMachine": "arn:{partition}:states:{region}:{account}:stateMachine:{name}",
    "AWS::SecretsManager::Secret": "arn:{partition}:secretsmanager:{region}:{account}:secret:{name}",
}
# AWS-owned SSM documents have ARNs without an account (arn:aws:ssm:REGION::document/AWS-StartPortForwardingSession,
# the Session Manager user guide's sample policies); the reference lists only document/ARNs with ${Account}.
AWS_OWNED_SSM_DOCUMENT = re.compile(r"^arn:[a-z-]+:ssm:[a-z0-9-]+::document/AWS-[A-Za-z0-9_.-]+$")


class UnresolvableIntrinsic(ValueError):
    pass


@dataclass(frozen=True)
class StackContext:
    """What the resolver needs of one template: its stack's region and account, and its resources' types."""

    name: str
    region: str
    account: str
    resource_types: dict[str, str]


def resolve_arn(value, stack: StackContext) -> str:
    """A resource element as a concrete string: pseudo parameters become the stack's partition, region and account,
    a Ref to a resource or parameter becomes a placeholder name (its logical id), a GetAtt Arn becomes an ARN of the
    resource's type (GETATT_ARN_FORMS), any other GetAtt a placeholder (LOGICALID.Attribute)."""
    if isinstance(value, str):
        return value
    if not (isinstance(value, dict) and len(value) == 1):
        raise UnresolvableIntrinsic(f"{stack.name}: not a string or an intrinsic function: {value!r}")
    ((function, argument),) = value.items()
    if function == "Ref":
        return _ref(argument, stack)
    if function == "Fn::GetAtt":
        logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
        return _get_att(logical_id, attribute, stack)
    if function == "Fn::Join":
        separator, parts = argument
        return separator.join(resolve_arn(part, stack) for part in parts)
    if function == "Fn::Sub":
        template, variables = (argument, {}) if isinstance(argument, str) else argument
        return _sub(template, variables, stack)
    raise UnresolvableIntrinsic(f"{stack.name}: {function} is not resolved in ARNs: {value!r}")


def _ref(name: str, stack: StackContext) -> str:
    pseudo = {
        "AWS::Partition": PARTITION,
        "AWS::Region": stack.region,
        "AWS::AccountId": stack.account,
        "AWS::URLSuffix": URL_SUFFIX,
        "AWS::StackName": stack.name,
    }
    if name in pseudo:
        return pseudo[name]
    if name.startswith("AWS::"):
        raise UnresolvableIntrinsic(f"{stack.name}: pseudo parameter {name} is not resolved in ARNs")
    if (form := REF_ARN_FORMS.get(stack.resource_types.get(name, ""))) is not None:
        return form.format(partition=PARTITION, region=stack.region, account=stack.account, name=name)
    return name


def _get_att(logical_id: str, attribute: str, stack: StackContext) -> str:
    if attribute != "Arn":
        return f"{logical_id}.{attribute}"
    resource_type = stack.resource_types.get(logical_id)
    if resource_type not in GETATT_ARN_FORMS:
        raise UnresolvableIntrinsic(
            f"{stack.name}: Fn::GetAtt {logical_id}.Arn of a {resource_type}: add its ARN form to GETATT_ARN_FORMS"
        )
    return GETATT_ARN_FORMS[resource_type].format(
        partition=PARTITION, region=stack.region, account=stack.account, name=logical_id
    )


def _sub(template: str, variables: dict, stack: StackContext) -> str:
    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in variables:
            return resolve_arn(variables[name], stack)
        if "." in name and not name.startswith("AWS::"):
            return _get_att(*name.split(".", 1), stack)
        return _ref(name, stack)

    return re.sub(r"\$\{([^}]+)\}", substitute, template)


@dataclass(frozen=True)
class Privilege:
    name: str
    arn_formats: tuple[tuple[str, str], ...]  # (resource type, ARN pattern); empty: the action supports only "*"

    def matches(self, resource: str, stack: StackContext) -> bool:
        if resource == "*":
            return True
        if AWS_OWNED_SSM_DOCUMENT.match(resource):
            resource = resource.replace("::document/", f":{stack.account}:document/")
        return any(is_arn_match(resource_type, arn_format, resource) for resource_type, arn_format in self.arn_formats)


def privileges(action: str) -> list[Privilege]:
    """The reference's privileges an action names (wildcards expanded); an unknown action raises."""
    found = []
    for expanded in expand_action(action):
        info = get_privilege_info(expanded["service"], expanded["action"])
        formats = tuple(
            (entry["resource_type"], get_arn_format(entry["resource_type"], info["service_resources"]))
            for entry in info["resource_types"]
            if entry["resource_type"]
        )
        found.append(Privilege(f"{expanded['service']}:{expanded['action']}", formats))
    return found


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Statement:
    where: str  # template, resource and Sid, for messages
    actions: tuple[str, ...]
    resources: tuple[str, ...]


def policy_statements(template: dict, stack: StackContext) -> list[Statement]:
    """Every statement with a Resource in every policy document of the template (identity policies, inline role
    policies, key and resource policies); trust policies have none and are left out."""
    found = []

    def walk(node, logical_id: str) -> None:
        if isinstance(node, dict):
            for index, statement in enumerate(as_list(node.get("Statement", []))):
                if isinstance(statement, dict) and "Effect" in statement:
                    found.extend(
                        _statement(
                            statement, f"{stack.name} {logical_id} statement {statement.get('Sid', index)}", stack
                        )
                    )
            for key, value in node.items():
                if key != "Statement":
                    walk(value, logical_id)
        elif isinstance(node, list):
            for value in node:
                walk(value, logical_id)

    for logical_id, resource in template["Resources"].items():
        walk(resource.get("Properties", {}), logical_id)
    return found


def _statement(statement: dict, where: str, stack: StackContext) -> list[Statement]:
    for unsupported in ("NotAction", "NotResource"):
        assert unsupported not in statement, f"{where}: {unsupported} is not checked here; write Action/Resource"
    if "Resource" not in statement:
        return []
    return [
        Statement(
            where,
            tuple(as_list(statement["Action"])),
            tuple(resolve_arn(r, stack) for r in as_list(statement["Resource"])),
        )
    ]


def unmatched_resources(statement: Statement, stack: StackContext) -> list[str]:
    """Resources of the statement that none of its actions can act on."""
    statement_privileges = [p for action in statement.actions for p in privileges(action)]
    return [
        f"{statement.where}: {resource} matches no resource type of {', '.join(statement.actions)}"
        for resource in statement.resources
        if not any(p.matches(resource, stack) for p in statement_privileges)
    ]


# aws-cdk-lib's own grants put a bucket with its objects, and a log group with and without its streams (":*"), in one
# statement (Bucket.grantRead, CodeBuild's default log group): these pairs match nothing, are harmless, and are not
# this project's to split. Each must still occur (test_aws_cdk_lib_grant_pairs_still_occur).
AWS_CDK_LIB_GRANT_PAIRS = (
    ("s3:GetObject*", re.compile(r"^arn:aws:s3:::[^/]+$")),
    ("s3:GetBucket*", re.compile(r"^arn:aws:s3:::[^/]+/.+$")),
    ("logs:CreateLogStream", re.compile(r"^arn:aws:logs:[a-z0-9-]+:\d{12}:log-group:[^:]+$")),
    ("logs:PutLogEvents", re.compile(r"^arn:aws:logs:[a-z0-9-]+:\d{12}:log-group:[^:]+$")),
)


def aws_cdk_lib_grant_pair(action: str, resource: str) -> bool:
    return any(action == known and pattern.match(resource) for known, pattern in AWS_CDK_LIB_GRANT_PAIRS)


def mismatched_pairs(statement: Statement, stack: StackContext) -> list[tuple[str, str]]:
    """(action, resource) pairs of the statement where the action (none of its expansions) can act on the resource."""
    return [
        (action, resource)
        for action in statement.actions
        for resource in statement.resources
        if not any(p.matches(resource, stack) for p in privileges(action))
    ]


def unmatched_pairs(statement: Statement, stack: StackContext) -> list[str]:
    return [
        f"{statement.where}: {action} cannot act on {resource}"
        for action, resource in mismatched_pairs(statement, stack)
        if not aws_cdk_lib_grant_pair(action, resource)
    ]


def stack_templates(*assemblies) -> list[tuple[dict, StackContext]]:
    found = []
    for synthesized in assemblies:
        for name, artifact in sorted(synthesized.manifest["artifacts"].items()):
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            account, region = artifact["environment"].removeprefix("aws://").split("/")
            template = json.loads((synthesized.directory / artifact["properties"]["templateFile"]).read_text())
            types = {logical_id: resource["Type"] for logical_id, resource in template["Resources"].items()}
            found.append((template, StackContext(name, region, account, types)))
    return found


@pytest.fixture(scope="module")
def templates(assembly, ami_pipeline_assembly) -> list[tuple[dict, StackContext]]:
    """The stacks app.py synthesizes: every shipped environment's (the session's assembly) and the AMI pipeline's."""
    return stack_templates(assembly, ami_pipeline_assembly)


@pytest.fixture(scope="module")
def matrix_templates(matrix_assembly) -> list[tuple[dict, StackContext]]:
    """The environment matrix's stacks (tests/stacks/matrix.py): configurations no shipped environment has, among
    them an Auto Scaling group without a Capacity Block (asg-g5) and its GroupCapacity handler's role."""
    return stack_templates(matrix_assembly)


def test_every_stack_of_the_app_is_checked(templates):
    names = {stack.name for _, stack in templates}
    assert {
        "gpufleet-ami-pipeline",
        "gpufleet-dev-cluster",
        "gpufleet-dev-network",
        "gpufleet-elastic-cluster",
        "gpufleet-elastic-network",
        "gpufleet-elastic-storage",
        "gpufleet-h100-cluster",
        "gpufleet-p5-block-cluster",
        "gpufleet-p5-block-network",
        "gpufleet-p5-eks-eks",
        "gpufleet-p5-eks-gpu-nodes",
        "gpufleet-p5-eks-network",
        "gpufleet-prod-cluster",
        "gpufleet-prod-network",
        "gpufleet-prod-storage",
    } == names
    checked = {stack.name for template, stack in templates if policy_statements(template, stack)}
    # Every stack has statements to check but the EKS GPU nodes' (launch templates, node groups and a placement group:
    # their role is the cluster stack's); the EKS stack's are those of its kubectl handler (aws_eks_v2's: the chart
    # assets' bucket, the cluster, invoking the handler).
    assert checked == names - {"gpufleet-p5-eks-gpu-nodes"}


# The Spot Fleet calls whose one required resource type is a spot-fleet-request (parliament's reference): the fleet
# teardown and the capacity fallback grant them on their fleet request, never on "*".
SPOT_FLEET_REQUEST_ACTIONS = (
    "ec2:CancelSpotFleetRequests",
    "ec2:DescribeSpotFleetInstances",
    "ec2:DescribeSpotFleetRequestHistory",
    "ec2:ModifySpotFleetRequest",
)


def test_spot_fleet_request_actions_act_on_a_spot_fleet_request_in_the_reference():
    for action in SPOT_FLEET_REQUEST_ACTIONS:
        service, name = action.split(":")
        required = [
            entry["resource_type"]
            for entry in get_privilege_info(service, name)["resource_types"]
            if entry["resource_type"].endswith("*")
        ]
        assert required == ["spot-fleet-request*"], action
    # DescribeSpotFleetRequests takes no resource type: it stays on "*".
    assert [
        entry["resource_type"] for entry in get_privilege_info("ec2", "DescribeSpotFleetRequests")["resource_types"]
    ] == [""]


def test_spot_fleet_request_actions_are_granted_on_the_fleet_request_only(templates):
    granted = [
        (statement.where, resource)
        for template, stack in templates
        for statement in policy_statements(template, stack)
        if set(statement.actions) & set(SPOT_FLEET_REQUEST_ACTIONS)
        for resource in statement.resources
    ]
    assert {where.split()[0] for where, _ in granted} == {
        "gpufleet-dev-cluster",
        "gpufleet-elastic-cluster",
        "gpufleet-h100-cluster",
        "gpufleet-prod-cluster",
    }
    for where, resource in granted:
        assert re.fullmatch(r"arn:aws:ec2:[a-z0-9-]+:\d{12}:spot-fleet-request/Fleet[0-9A-F]{8}", resource), where


def test_every_policy_resource_is_one_its_actions_can_match(templates):
    problems = [
        problem
        for template, stack in templates
        for statement in policy_statements(template, stack)
        for problem in unmatched_resources(statement, stack)
    ]
    assert problems == []


def test_every_action_can_act_on_every_resource_of_its_statement(templates):
    problems = [
        problem
        for template, stack in templates
        for statement in policy_statements(template, stack)
        for problem in unmatched_pairs(statement, stack)
    ]
    assert problems == []


def test_every_policy_resource_of_the_matrix_is_one_its_actions_can_match_and_act_on(matrix_templates):
    problems = [
        problem
        for template, stack in matrix_templates
        for statement in policy_statements(template, stack)
        for problem in unmatched_resources(statement, stack) + unmatched_pairs(statement, stack)
    ]
    assert problems == []


def test_set_desired_capacity_acts_on_an_auto_scaling_group_and_takes_its_tags_in_the_reference():
    (entry,) = get_privilege_info("autoscaling", "SetDesiredCapacity")["resource_types"]
    assert entry["resource_type"] == "autoScalingGroup*"
    assert "aws:ResourceTag/${TagKey}" in entry["condition_keys"]


def test_set_desired_capacity_is_granted_on_the_environments_groups_only(matrix_templates):
    """The GroupCapacity handler of a group without a Capacity Block and the BlockCapacity handler of a block group
    (which also puts and deletes the group's scheduled actions) name the environment's groups (under replace-all, the
    name prefix that covers the old and the new group) and require the environment tag."""
    granted = [
        (stack.name, [resolve_arn(r, stack) for r in as_list(statement["Resource"])], statement.get("Condition"))
        for template, stack in matrix_templates
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
        if "autoscaling:SetDesiredCapacity" in as_list(statement["Action"])
    ]
    assert granted == [
        (
            "gpufleet-asg-g5-cluster",
            [
                "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:"
                "autoScalingGroupName/gpufleet-asg-g5-nodes-ami-*"
            ],
            {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "asg-g5"}},
        ),
        (
            "gpufleet-block-p5-cluster",
            [
                "arn:aws:autoscaling:us-east-2:123456789012:autoScalingGroup:*:autoScalingGroupName/gpufleet-block-p5-nodes"
            ],
            {"StringEquals": {"aws:ResourceTag/gpufleet:environment": "block-p5"}},
        ),
    ]


def test_aws_cdk_lib_grant_pairs_still_occur(templates):
    pairs = {
        pair
        for template, stack in templates
        for statement in policy_statements(template, stack)
        for pair in mismatched_pairs(statement, stack)
    }
    for action, pattern in AWS_CDK_LIB_GRANT_PAIRS:
        assert any(a == action and pattern.match(r) for a, r in pairs), f"{action} {pattern.pattern}: remove it"


# The checker itself, on literal statements.

STACK = StackContext(
    "probe",
    "us-east-1",
    "123456789012",
    {
        "BuildRole": "AWS::IAM::Role",
        "Profile": "AWS::IAM::InstanceProfile",
        "Logs": "AWS::Logs::LogGroup",
        "Vpc": "AWS::EC2::VPC",
        "Fleet": "AWS::EC2::SpotFleet",
        "Waiter": "AWS::StepFunctions::StateMachine",
    },
)


def joined(*parts) -> dict:
    return {"Fn::Join": ["", list(parts)]}


@pytest.mark.parametrize(
    ("element", "expected"),
    [
        ("arn:aws:s3:::bucket", "arn:aws:s3:::bucket"),
        (
            joined(
                "arn:",
                {"Ref": "AWS::Partition"},
                ":ec2:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":instance/*",
            ),
            "arn:aws:ec2:us-east-1:123456789012:instance/*",
        ),
        (
            joined(
                "arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:spot-fleet-request/", {"Ref": "Fleet"}
            ),
            "arn:aws:ec2:us-east-1:123456789012:spot-fleet-request/Fleet",
        ),
        (
            joined(
                "arn:aws:ec2:us-east-1:123456789012:security-group/", {"Fn::GetAtt": ["Vpc", "DefaultSecurityGroup"]}
            ),
            "arn:aws:ec2:us-east-1:123456789012:security-group/Vpc.DefaultSecurityGroup",
        ),
        ({"Fn::GetAtt": ["BuildRole", "Arn"]}, "arn:aws:iam::123456789012:role/BuildRole"),
        ({"Fn::GetAtt": "Profile.Arn"}, "arn:aws:iam::123456789012:instance-profile/Profile"),
        ({"Fn::GetAtt": ["Logs", "Arn"]}, "arn:aws:logs:us-east-1:123456789012:log-group:Logs:*"),
        (
            {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/${Name}"},
            "arn:aws:ssm:us-east-1:123456789012:parameter/Name",
        ),
        (
            {"Fn::Sub": ["${Role}/x/${!Literal}", {"Role": {"Fn::GetAtt": ["BuildRole", "Arn"]}}]},
            "arn:aws:iam::123456789012:role/BuildRole/x/${Literal}",
        ),
        ({"Fn::Sub": "${Logs.Arn}"}, "arn:aws:logs:us-east-1:123456789012:log-group:Logs:*"),
        ({"Ref": "Waiter"}, "arn:aws:states:us-east-1:123456789012:stateMachine:Waiter"),
    ],
)
def test_resolver_turns_intrinsics_into_concrete_arns(element, expected):
    assert resolve_arn(element, STACK) == expected


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ({"Fn::GetAtt": ["Vpc", "Arn"]}, "probe: Fn::GetAtt Vpc.Arn of a AWS::EC2::VPC: add its ARN form"),
        ({"Fn::GetAtt": ["Missing", "Arn"]}, "probe: Fn::GetAtt Missing.Arn of a None: add its ARN form"),
        ({"Fn::ImportValue": "shared-arn"}, "probe: Fn::ImportValue is not resolved in ARNs"),
        ({"Ref": "AWS::NotificationARNs"}, "probe: pseudo parameter AWS::NotificationARNs is not resolved"),
        (["a", "b"], "probe: not a string or an intrinsic function"),
    ],
)
def test_resolver_refuses_what_it_cannot_resolve(element, message):
    with pytest.raises(UnresolvableIntrinsic) as raised:
        resolve_arn(element, STACK)
    assert str(raised.value).startswith(message)


def checked(actions, resources) -> tuple[list[str], list[str]]:
    statement = Statement("probe", tuple(actions), tuple(resolve_arn(r, STACK) for r in resources))
    return unmatched_resources(statement, STACK), unmatched_pairs(statement, STACK)


def test_a_snapshot_arn_with_an_account_matches_nothing():
    with_account = joined("arn:", {"Ref": "AWS::Partition"}, ":ec2:us-east-1:123456789012:snapshot/*")
    resources, pairs = checked(["ec2:CreateImage", "ec2:DeleteSnapshot"], [with_account])
    assert resources == [
        "probe: arn:aws:ec2:us-east-1:123456789012:snapshot/* matches no resource type of "
        "ec2:CreateImage, ec2:DeleteSnapshot"
    ]
    assert len(pairs) == 2
    assert checked(["ec2:CreateImage", "ec2:DeleteSnapshot"], ["arn:aws:ec2:us-east-1::snapshot/*"]) == ([], [])


def test_reference_has_snapshot_and_image_arns_without_an_account():
    (snapshot,) = privileges("ec2:DeleteSnapshot")
    assert snapshot.arn_formats == (("snapshot*", "arn:*:ec2:*::snapshot/*"),)
    (deregister,) = privileges("ec2:DeregisterImage")
    assert deregister.arn_formats == (("image*", "arn:*:ec2:*::image/*"),)


def test_pairs_catch_an_action_that_cannot_act_on_a_resource_of_its_statement():
    resources, pairs = checked(
        ["ec2:DeregisterImage", "ec2:DeleteSnapshot"],
        ["arn:aws:ec2:us-east-1::image/*", "arn:aws:ec2:us-east-1::snapshot/*"],
    )
    assert resources == []
    assert pairs == [
        "probe: ec2:DeregisterImage cannot act on arn:aws:ec2:us-east-1::snapshot/*",
        "probe: ec2:DeleteSnapshot cannot act on arn:aws:ec2:us-east-1::image/*",
    ]


def test_actions_that_support_only_star_accept_star_only():
    assert checked(["ec2:DescribeImages"], ["*"]) == ([], [])
    resources, pairs = checked(["ec2:DescribeImages"], ["arn:aws:ec2:us-east-1::image/*"])
    assert resources and pairs


def test_wildcard_actions_match_through_any_expansion():
    bucket, objects = "arn:aws:s3:::assets", "arn:aws:s3:::assets/*"
    assert checked(["s3:GetObject*", "s3:List*"], [bucket, objects])[0] == []
    assert checked(["s3:GetObject*"], [objects]) == ([], [])
    assert checked(["s3:GetObject*"], [bucket])[0] == [
        "probe: arn:aws:s3:::assets matches no resource type of s3:GetObject*"
    ]


def test_aws_owned_ssm_documents_are_the_one_accountless_exception():
    document = "arn:aws:ssm:us-east-1::document/AWS-StartPortForwardingSession"
    assert checked(["ssm:StartSession"], [document]) == ([], [])
    assert checked(["ssm:StartSession"], ["arn:aws:ssm:us-east-1::document/MyTeam-Session"])[0]


def test_unknown_actions_fail():
    with pytest.raises(Exception, match="Unknown action ec2:LaunchEverything"):
        privileges("ec2:LaunchEverything")


def test_statements_are_found_in_every_kind_of_policy_document():
    template = {
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": "sts:AssumeRole",
                                "Principal": {"Service": "ec2.amazonaws.com"},
                            }
                        ]
                    },
                    "Policies": [
                        {
                            "PolicyName": "inline",
                            "PolicyDocument": {
                                "Statement": [
                                    {
                                        "Sid": "Inline",
                                        "Effect": "Allow",
                                        "Action": "ssm:UpdateInstanceInformation",
                                        "Resource": "*",
                                    }
                                ]
                            },
                        }
                    ],
                },
            },
            "Key": {
                "Type": "AWS::KMS::Key",
                "Properties": {
                    "KeyPolicy": {
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": "kms:*",
                                "Resource": "*",
                                "Principal": {"AWS": "arn:aws:iam::1:root"},
                            }
                        ]
                    }
                },
            },
        }
    }
    found = policy_statements(template, STACK)
    assert [(s.where, s.actions) for s in found] == [
        ("probe Role statement Inline", ("ssm:UpdateInstanceInformation",)),
        ("probe Key statement 0", ("kms:*",)),
    ]


@pytest.fixture(scope="module")
def gated_pipeline_templates(tmp_path_factory) -> list[tuple[dict, StackContext]]:
    """The AMI pipeline with its acceptance gate on (ami/pipeline.yaml ships it off)."""
    from tests.gate_pipeline import synthesize_gate_pipeline

    return stack_templates(synthesize_gate_pipeline(tmp_path_factory.mktemp("gated-pipeline")))


def test_every_policy_resource_of_the_acceptance_gate_is_one_its_actions_can_match_and_act_on(
    gated_pipeline_templates,
):
    problems = [
        problem
        for template, stack in gated_pipeline_templates
        for statement in policy_statements(template, stack)
        for problem in unmatched_resources(statement, stack) + unmatched_pairs(statement, stack)
    ]
    assert problems == []
