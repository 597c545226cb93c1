"""docs/operations/operator-policy.json, the IAM policy of the operator who runs gpufleet's commands against AWS
(docs/operations/permissions.md), against the calls those commands make.

1. The calls: every AWS API operation the code of the operator commands can reach calls, found in the source (the
   modules each command imports, transitively, and the operations named there: method calls on a client, and
   operation names given as text, to get_paginator or to a helper that calls one). The IAM action of an operation is
   the service's prefix (the botocore model's signingName, else its endpointPrefix) and the operation's name, with the
   exceptions in ACTION_EXCEPTIONS, each held to the model text it comes from.
2. Each such action is granted on the resource types it requires, as the IAM Service Authorization Reference that
   parliament bundles lists them.
3. The scoped statements do what they say for the requests gpufleet makes for a shipped environment (prod), with
   names taken from gpufleet's own code, and refuse their neighbours (an untagged instance, another key, the cluster
   stack).
4. parliament finds nothing in the policy but DOCUMENTED_FINDINGS.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from fnmatch import fnmatchcase
from pathlib import Path

import botocore.session
import pytest
from botocore import xform_name

from gpufleet.constants import ENVIRONMENT_TAG_KEY
from gpufleet.fallback import parameter_name
from gpufleet.loading import load_environment
from gpufleet.ops import cdk_cli
from gpufleet.ops.fleet import cluster_stack_name
from gpufleet.ops.runs import secret_namespace, upload_workdir
from gpufleet.ssm_batches import RUN_SHELL_SCRIPT

with warnings.catch_warnings():
    # parliament 1.6.4 reads its bundled data through pkg_resources, which warns that it is deprecated.
    warnings.simplefilter("ignore", UserWarning)
    from parliament import analyze_policy_string, is_arn_match
    from parliament.statement import get_arn_format, get_privilege_info

ROOT = Path(__file__).resolve().parents[2]
POLICY_PATH = ROOT / "docs" / "operations" / "operator-policy.json"
POLICY = json.loads(POLICY_PATH.read_text())
# The commands that call AWS as the operator (gpufleet/cli.py); `ami list` and `ami prune` belong to the AMI
# pipeline's operator, and validate, summary, reachability, the references, k8s, nccl-report and topo-check make no
# AWS call.
OPERATOR_COMMANDS = (
    "preflight",
    "up",
    "down",
    "plan",
    "cost",
    "status",
    "hosts",
    "run",
    "runs",
    "acceptance",
    "rehearse",
)
# Operation -> IAM action where the two differ, each with the text of botocore's model that says so (checked below).
ACTION_EXCEPTIONS = {
    # "You must have permission to perform the s3:ListBucket action." (ListObjectsV2's documentation)
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    # "No permissions are required to perform this operation." (GetCallerIdentity's documentation)
    ("sts", "GetCallerIdentity"): None,
}
EXCEPTION_SOURCES = {
    ("s3", "ListObjectsV2"): "You must have permission to perform the s3:ListBucket action.",
    ("sts", "GetCallerIdentity"): "No permissions are required to perform this operation.",
}
# Calls that would reach AWS without naming an operation the scan can see: boto3's S3 transfer manager (it chooses
# between PutObject and the multipart calls), waiters (the operation is in the waiter's model) and resources.
HIDDEN_CALLS = ("upload_file", "upload_fileobj", "download_file", "download_fileobj", "get_waiter", "resource")


def module_path(name: str) -> Path | None:
    path = ROOT / (name.replace(".", "/") + ".py")
    if path.is_file():
        return path
    package = ROOT / name.replace(".", "/") / "__init__.py"
    return package if package.is_file() else None


def operator_modules() -> dict[str, ast.Module]:
    """The gpufleet modules the operator commands import, at the top or inside a function, transitively."""
    found: dict[str, ast.Module] = {}
    todo = [f"gpufleet.commands.{command}" for command in OPERATOR_COMMANDS]
    while todo:
        name = todo.pop()
        if name in found or (path := module_path(name)) is None:
            continue
        tree = ast.parse(path.read_text())
        found[name] = tree
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names if alias.name.startswith("gpufleet")]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpufleet"):
                todo += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def client_services(modules: dict[str, ast.Module]) -> set[str]:
    return {
        node.args[0].value
        for tree in modules.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "client"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def named_operations(modules: dict[str, ast.Module], services: set[str]) -> dict[tuple[str, str], set[str]]:
    """(service, Operation) -> the modules that name it: as a method called on anything, or as a text of its own. An
    operation name shared by two services counts for both (the policy then grants both)."""
    session = botocore.session.get_session()
    by_name: dict[str, list[tuple[str, str]]] = {}
    for service in services:
        for operation in session.get_service_model(service).operation_names:
            by_name.setdefault(xform_name(operation), []).append((service, operation))
    found: dict[tuple[str, str], set[str]] = {}
    for module, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value
            else:
                continue
            for operation in by_name.get(name, []):
                found.setdefault(operation, set()).add(module)
    return found


def iam_prefix(service: str) -> str:
    metadata = botocore.session.get_session().get_service_model(service).metadata
    return str(metadata.get("signingName") or metadata["endpointPrefix"])


def iam_action(service: str, operation: str) -> str | None:
    if (service, operation) in ACTION_EXCEPTIONS:
        return ACTION_EXCEPTIONS[(service, operation)]
    return f"{iam_prefix(service)}:{operation}"


@pytest.fixture(scope="module")
def calls() -> dict[tuple[str, str], set[str]]:
    modules = operator_modules()
    return named_operations(modules, client_services(modules))


def statements() -> list[dict]:
    return list(POLICY["Statement"])


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def action_matches(pattern: str, action: str) -> bool:
    return fnmatchcase(action.lower(), pattern.lower())


# -- 1. the calls -----------------------------------------------------------------------------------------------------


def test_every_command_is_an_operator_command_or_one_named_as_none():
    from gpufleet.cli import COMMAND_MODULES

    others = {
        "validate",
        "summary",
        "reachability",
        "environment_reference",
        "ami_profile_reference",
        "cli_reference",
        "ami",
        "k8s",
        "nccl_report",
        "topo_check",
    }
    assert {name.removeprefix("gpufleet.commands.") for name in COMMAND_MODULES} == set(OPERATOR_COMMANDS) | others


def test_the_scan_reads_every_operator_command_and_the_modules_they_import():
    modules = operator_modules()

    assert {f"gpufleet.commands.{command}" for command in OPERATOR_COMMANDS} <= set(modules)
    # Imported inside functions only: the scan follows those imports too.
    assert {"gpufleet.ops.down", "gpufleet.ops.rehearse", "gpufleet.ops.up", "gpufleet.ssm_batches"} <= set(modules)
    assert client_services(modules) == {
        "autoscaling",
        "cloudformation",
        "ec2",
        "eks",
        "fis",
        "fsx",
        "iam",
        "pricing",
        "resource-groups",
        "s3",
        "service-quotas",
        "ssm",
        "sts",
    }


def test_the_scan_sees_calls_made_through_paginators_helpers_and_shared_senders(calls):
    # get_paginator("list_objects_v2"), a helper given "describe_nat_gateways", ssm_batches' send_command, and a
    # call in a command module itself.
    assert calls[("s3", "ListObjectsV2")] == {"gpufleet.ops.down"}
    assert calls[("ec2", "DescribeNatGateways")] == {"gpufleet.ops.reachability_preflight"}
    assert calls[("ssm", "SendCommand")] == {"gpufleet.ssm_batches"}
    assert calls[("fis", "StartExperiment")] == {"gpufleet.ops.rehearse"}
    assert calls[("s3", "PutObject")] == {"gpufleet.ops.runs"}


def test_no_operator_module_calls_aws_in_a_way_the_scan_cannot_see():
    hidden = [
        (module, node.func.attr)
        for module, tree in operator_modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in HIDDEN_CALLS
    ]
    assert hidden == []


@pytest.mark.parametrize(("call", "text"), sorted(EXCEPTION_SOURCES.items()))
def test_each_action_exception_is_what_botocores_model_says(call, text):
    service, operation = call
    documentation = botocore.session.get_session().get_service_model(service).operation_model(operation).documentation
    assert text in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", documentation))


def test_iam_prefixes_come_from_the_models_signing_name_or_endpoint_prefix():
    assert {service: iam_prefix(service) for service in ("service-quotas", "pricing", "resource-groups", "ec2")} == {
        "service-quotas": "servicequotas",
        "pricing": "pricing",
        "resource-groups": "resource-groups",
        "ec2": "ec2",
    }


# -- 2. every call's action is granted on the resource types it requires ----------------------------------------------


def resource_formats(action: str) -> tuple[list[tuple[str, str]], bool]:
    """(resource type, ARN format) of the resource types ACTION takes, and whether it requires each of them (True)
    or one of them will do (False: none is required); [] for an action without resource types, which only Resource
    "*" grants."""
    service, name = action.split(":")
    info = get_privilege_info(service, name)
    entries = [entry["resource_type"] for entry in info["resource_types"] if entry["resource_type"]]
    required = [entry.rstrip("*") for entry in entries if entry.endswith("*")]
    kinds = required or entries
    return [(kind, get_arn_format(kind, info["service_resources"])) for kind in kinds], bool(required)


def granted_on(action: str) -> list[str]:
    return [
        resource
        for statement in statements()
        if statement["Effect"] == "Allow"
        and any(action_matches(pattern, action) for pattern in as_list(statement["Action"]))
        for resource in as_list(statement["Resource"])
    ]


def test_every_call_of_the_operator_commands_is_granted(calls):
    missing = []
    for service, operation in sorted(calls):
        action = iam_action(service, operation)
        if action is None:
            continue
        resources = granted_on(action)
        formats, each = resource_formats(action)
        if not formats:
            if "*" not in resources:
                missing.append(f"{action} (no resource type: needs Resource *)")
            continue
        unmatched = [
            f"{action} on {kind} ({arn_format})"
            for kind, arn_format in formats
            if not any(resource == "*" or is_arn_match(kind, arn_format, resource) for resource in resources)
        ]
        if each or len(unmatched) == len(formats):
            missing += unmatched
    assert missing == []


def test_the_policy_grants_no_action_that_no_source_accounts_for(calls):
    """What the policy grants is a call of the commands, or one of the extra grants docs/operations/permissions.md
    explains (the CDK CLI's roles, the FIS service-linked role, the AWS CLI commands of the guides)."""
    called = {iam_action(*call) for call in calls} - {None}
    extra = {
        "sts:AssumeRole",
        "sts:TagSession",
        "iam:CreateServiceLinkedRole",
        "secretsmanager:CreateSecret",
        "secretsmanager:PutSecretValue",
        "ec2:GetConsoleOutput",
        "ssm:StartSession",
        "ssmmessages:OpenDataChannel",
        "ssm:ResumeSession",
        "ssm:TerminateSession",
    }
    granted = {action for statement in statements() for action in as_list(statement["Action"])}
    assert not any("*" in action for action in granted)
    assert granted - called == extra


# -- 3. the scoped statements, for the requests of a shipped environment ----------------------------------------------


def arn_like(resource: str, pattern: str, context: dict[str, str]) -> bool:
    """IAM's Resource matching: * and ? anywhere ("Asterisk (*) represents any combination of zero or more
    characters", IAM user guide, reference_policies_elements_resource.html), policy variables substituted."""
    for key, value in context.items():
        pattern = pattern.replace("${" + key + "}", value)
    return fnmatchcase(resource, pattern)


def condition_holds(condition: dict, context: dict[str, str]) -> bool:
    for operator, keys in condition.items():
        for key, expected in keys.items():
            expected = expected.replace("${aws:userid}", context.get("aws:userid", "\0"))
            value = context.get(key)
            if operator == "BoolIfExists":
                holds = value is None or value == expected
            elif operator == "StringEquals":
                holds = value == expected
            elif operator == "StringLike":
                holds = value is not None and fnmatchcase(value, expected)
            else:
                raise AssertionError(f"{operator}: the evaluation here does not know it")
            if not holds:
                return False
    return True


def allowed(action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """The policy alone allows ACTION on RESOURCE in CONTEXT (condition keys; aws:userid) — an identity policy of
    Allow statements only, so one matching statement is enough."""
    context = context or {}
    return any(
        statement["Effect"] == "Allow"
        and any(action_matches(pattern, action) for pattern in as_list(statement["Action"]))
        and any(arn_like(resource, pattern, context) for pattern in as_list(statement["Resource"]))
        and condition_holds(statement.get("Condition", {}), context)
        for statement in statements()
    )


ACCOUNT = "123456789012"
REGION = "us-east-1"


@pytest.fixture(scope="module")
def prod():
    return load_environment(ROOT / "environments" / "prod.yaml")


def tagged(env_name: str) -> dict[str, str]:
    return {f"aws:ResourceTag/{ENVIRONMENT_TAG_KEY}": env_name, f"ssm:resourceTag/{ENVIRONMENT_TAG_KEY}": env_name}


class RecordingS3:
    def __init__(self) -> None:
        self.puts: list[tuple[str, str]] = []

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> dict:  # noqa: N803 (boto3's names)
        self.puts.append((Bucket, Key))
        return {}


def test_run_may_upload_its_workdir_where_gpufleet_run_puts_it_and_nowhere_else(prod, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    s3 = RecordingS3()
    upload_workdir(s3, tmp_path, prod.data_repository_location, "20261126-210500-3fa2", region=REGION)
    ((bucket, key),) = s3.puts

    assert (bucket, key) == (
        f"gpufleet-prod-{ACCOUNT}-{REGION}",
        "prod/gpufleet-runs/20261126-210500-3fa2/workdir.tar.gz",
    )
    assert allowed("s3:PutObject", f"arn:aws:s3:::{bucket}/{key}")
    assert not allowed("s3:PutObject", f"arn:aws:s3:::{bucket}/prod/data/checkpoints/step-1")
    assert not allowed("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}")
    assert allowed("s3:ListBucket", f"arn:aws:s3:::{bucket}")
    assert not allowed("s3:ListBucket", "arn:aws:s3:::someone-elses-bucket")


def test_run_command_goes_to_gpufleet_nodes_only_with_aws_run_shell_script(prod):
    instance = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"

    # AWS-owned documents have ARNs without an account (the Session Manager user guide's sample policies).
    assert allowed("ssm:SendCommand", f"arn:aws:ssm:{REGION}::document/{RUN_SHELL_SCRIPT}")
    assert not allowed("ssm:SendCommand", f"arn:aws:ssm:{REGION}::document/AWS-RunPowerShellScript")
    assert allowed("ssm:SendCommand", instance, tagged(prod.name))
    assert not allowed("ssm:SendCommand", instance)


def test_cloudformation_reads_every_stack_of_the_environment_and_deletes_only_its_storage_stack(prod):
    def stack(name: str) -> str:
        return f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/5b1f7e30-0000-11ef-0000-0a1b2c3d4e5f"

    storage = f"{prod.stack_prefix}-storage"
    for name in (cluster_stack_name(prod), f"{prod.stack_prefix}-network", storage):
        assert allowed("cloudformation:DescribeStacks", stack(name)), name
        assert allowed("cloudformation:GetTemplate", stack(name)), name
    for action in ("DeleteStack", "UpdateTerminationProtection", "DescribeStackResources"):
        assert allowed(f"cloudformation:{action}", stack(storage))
        assert not allowed(f"cloudformation:{action}", stack(cluster_stack_name(prod)))
    assert not allowed("cloudformation:DescribeStacks", stack("CDKToolkit"))
    assert not allowed("cloudformation:CreateChangeSet", stack(cluster_stack_name(prod)))


def test_the_cdk_cli_may_assume_the_default_bootstrap_roles_only():
    for role in ("deploy-role", "file-publishing-role", "lookup-role", "image-publishing-role"):
        arn = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-{role}-{ACCOUNT}-{REGION}"
        assert allowed("sts:AssumeRole", arn) and allowed("sts:TagSession", arn), role
    assert not allowed("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/Admin")


def test_parameters_gpufleet_reads_and_no_others(prod):
    def parameter(name: str, account: str = ACCOUNT) -> str:
        return f"arn:aws:ssm:{REGION}:{account}:parameter{name}"

    assert allowed("ssm:GetParameter", parameter(cdk_cli.BOOTSTRAP_VERSION_PARAMETER))
    assert allowed("ssm:GetParameter", parameter(parameter_name(prod.name)))
    assert allowed("ssm:GetParameter", parameter(str(prod.fleet_ami.parameter)))
    # A Deep Learning AMI's public parameter (DLAMI developer guide, find-dlami-id.html), in either ARN form.
    public = "/aws/service/deeplearning/ami/x86_64/AMI_TYPE/latest/ami-id"
    assert allowed("ssm:GetParameter", parameter(public)) and allowed("ssm:GetParameter", parameter(public, ""))
    assert not allowed("ssm:GetParameter", parameter("/prod/database/password"))


def test_down_exports_and_deletes_tagged_file_systems_and_security_groups_only(prod):
    file_system = f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0"
    association = f"arn:aws:fsx:{REGION}:{ACCOUNT}:association/fs-0123456789abcdef0/dra-0123456789abcdef0"
    group = f"arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/sg-0123456789abcdef0"

    for action, resource in (
        ("fsx:UpdateDataRepositoryAssociation", association),
        ("fsx:CreateDataRepositoryTask", file_system),
        ("fsx:DeleteFileSystem", file_system),
        ("ec2:DeleteSecurityGroup", group),
    ):
        assert allowed(action, resource, tagged(prod.name)), action
        assert not allowed(action, resource), action
    # The task the export makes has no tags yet.
    assert allowed("fsx:CreateDataRepositoryTask", f"arn:aws:fsx:{REGION}:{ACCOUNT}:task/task-0123456789abcdef0")


def test_rehearse_starts_gpufleet_experiment_templates_only(prod):
    template = f"arn:aws:fis:{REGION}:{ACCOUNT}:experiment-template/EXT1a2b3c4d5e6f7"
    experiment = f"arn:aws:fis:{REGION}:{ACCOUNT}:experiment/EXP1a2b3c4d5e6f7"

    assert allowed("fis:StartExperiment", template, tagged(prod.name))
    assert not allowed("fis:StartExperiment", template)
    for action in ("StartExperiment", "GetExperiment", "ListExperimentResolvedTargets"):
        assert allowed(f"fis:{action}", experiment), action
    slr = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/fis.amazonaws.com/AWSServiceRoleForFIS"
    assert allowed("iam:CreateServiceLinkedRole", slr, {"iam:AWSServiceName": "fis.amazonaws.com"})
    assert not allowed("iam:CreateServiceLinkedRole", slr, {"iam:AWSServiceName": "spotfleet.amazonaws.com"})


def test_secrets_may_be_written_in_an_environment_namespace_only(prod):
    def secret(name: str) -> str:
        return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-AbCdEf"

    assert allowed("secretsmanager:CreateSecret", secret(f"{secret_namespace(prod.stack_prefix)}hf-token"))
    assert not allowed("secretsmanager:CreateSecret", secret(prod.cluster_user_key_secret_name))
    assert not allowed("secretsmanager:GetSecretValue", secret(f"{secret_namespace(prod.stack_prefix)}hf-token"))


def test_the_cluster_shell_opens_on_gpufleet_nodes_with_the_environments_document_only(prod):
    instance = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
    named = {**tagged(prod.name), "ssm:SessionDocumentAccessCheck": "true"}

    assert allowed("ssm:StartSession", instance, named)
    assert not allowed("ssm:StartSession", instance, {"ssm:SessionDocumentAccessCheck": "true"})
    # Without --document-name the session would be the default shell (ssm-user, with sudo): the check refuses it.
    assert not allowed("ssm:StartSession", instance, {**tagged(prod.name), "ssm:SessionDocumentAccessCheck": "false"})
    document = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/{prod.cluster_shell_document_name}"
    assert allowed("ssm:StartSession", document)
    assert not allowed("ssm:StartSession", f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/SSM-SessionManagerRunShell")
    session = f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/ops-0a1b2c3d4e5f67890"
    mine = {"aws:userid": "AROAEXAMPLE:ops", "ssm:resourceTag/aws:ssmmessages:session-id": "AROAEXAMPLE:ops"}
    assert allowed("ssm:TerminateSession", session, mine)
    assert not allowed("ssm:TerminateSession", session, {**mine, "aws:userid": "AROAOTHER:someone"})
    assert allowed("ssmmessages:OpenDataChannel", session)


def test_the_console_output_up_points_at_is_readable_for_gpufleet_nodes_only(prod):
    instance = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"

    assert allowed("ec2:GetConsoleOutput", instance, tagged(prod.name))
    assert not allowed("ec2:GetConsoleOutput", instance)


# -- 4. parliament ----------------------------------------------------------------------------------------------------

# (issue, Sid or the actions parliament names) -> why it stays. docs/operations/permissions.md repeats them.
DOCUMENTED_FINDINGS = {
    ("CREDENTIALS_EXPOSURE", "sts:assumerole"): "the CDK CLI deploys and destroys through the bootstrap's roles",
    ("PERMISSIONS_MANAGEMENT_ACTIONS", "iam:createservicelinkedrole"): "FIS makes its service-linked role at the "
    "first start, with the caller's permission; only that role, for fis.amazonaws.com",
    ("RESOURCE_MISMATCH", "RunCommandOnGpufleetNodesOnly"): "SendCommand's document is in the statement before: the "
    "tag condition must not apply to it (AWS's own example splits them the same way)",
    ("RESOURCE_MISMATCH", "DownExportsAndDeletesGpufleetFileSystems"): "the export task's own ARN is in the next "
    "statement: a task has no tags when it is made",
    ("RESOURCE_MISMATCH", "DownExportTask"): "the file system of the export is in the statement before, with its tag",
    ("RESOURCE_MISMATCH", "RehearseStartsGpufleetTemplatesOnly"): "the experiment StartExperiment makes is in the next "
    "statement: it has no tags when it is made",
    ("RESOURCE_MISMATCH", "RehearseFollowsItsExperiment"): "the template is in the statement before, with its tag",
    ("RESOURCE_MISMATCH", "SessionDataChannel"): "parliament 1.6.4's reference gives OpenDataChannel no resource "
    "type; AWS's sample policies grant it on the session (Session Manager user guide, "
    "getting-started-restrict-access-quickstart.html)",
    ("UNKNOWN_CONDITION_FOR_ACTION", "ClusterShellOnGpufleetNodes"): "ssm:SessionDocumentAccessCheck is newer than "
    "parliament 1.6.4's reference (Systems Manager user guide, getting-started-sessiondocumentaccesscheck.html)",
}


def finding_key(finding) -> tuple[str, str]:
    """A finding's issue and the Sid of the statement it is on (its line in the file), else the actions it names."""
    line = finding.location.get("line")
    if line is None:
        return finding.issue, ",".join(finding.location.get("actions", []))
    text = POLICY_PATH.read_text().splitlines()
    sids = [
        (number, match.group(1))
        for number, content in enumerate(text, start=1)
        if (match := re.search(r'"Sid": "([^"]+)"', content))
    ]
    # A statement's Sid is the line after its opening brace; a finding points at the brace or inside the statement.
    (sid,) = [sid for number, sid in sids if number - 1 <= line][-1:]
    return finding.issue, sid


def test_parliament_finds_nothing_but_the_documented_findings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        policy = analyze_policy_string(POLICY_PATH.read_text(), include_community_auditors=True)

    assert sorted(finding_key(finding) for finding in policy.findings) == sorted(DOCUMENTED_FINDINGS)


def test_every_statement_has_a_sid_the_permissions_page_explains():
    page = (ROOT / "docs" / "operations" / "permissions.md").read_text()
    sids = [statement["Sid"] for statement in statements()]

    assert len(set(sids)) == len(sids)
    assert [sid for sid in sids if f"`{sid}`" not in page] == []
