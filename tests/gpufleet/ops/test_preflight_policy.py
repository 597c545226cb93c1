"""Preflight's account-rules checks (issue 11 item 5) with botocore Stubber: a dry-run RequestSpotFleet for the
spot-fleet backend, an IAM policy simulation for the auto-scaling backend.

Every Stubber response for request_spot_fleet pins the exact request, DryRun=True included: a request without it
fails the test. The auto-scaling environment is dev with fleet.backend changed
(tests/gpufleet/ops/variants.py).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from gpufleet.loading import load_named_environment
from gpufleet.ops import preflight
from tests.gpufleet.ops.variants import with_fleet, with_tags

# What EC2 says with UnauthorizedOperation: a fixed sentence, then an encoded message that
# `aws sts decode-authorization-message` decodes (shortened here).
ENCODED = "Encoded authorization failure message: 4DdJ3yQ0cJ1v2oJ7rVn9wq5o3hN2cO8lQ_example-shortened"
DENIED_MESSAGE = f"You are not authorized to perform this operation. {ENCODED}"
DRY_RUN_REQUEST = {
    "DryRun": True,
    "SpotFleetRequestConfig": {
        "IamFleetRole": "arn:aws:iam::123456789012:role/aws-ec2-spot-fleet-tagging-role",
        "TargetCapacity": 1,
        "Type": "request",
        "AllocationStrategy": "priceCapacityOptimized",
        "LaunchSpecifications": [{"InstanceType": "p4d.24xlarge", "Placement": {"AvailabilityZone": "us-east-1a"}}],
    },
}


def spot_fleet_check(respond: Any, env: Any = None) -> preflight.Check:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        respond(stub)
        check = preflight.check_spot_fleet_policy(ec2, env or load_named_environment("dev"))
        stub.assert_no_pending_responses()
    return check


def dry_run_error(code: str, message: str, status: int) -> Any:
    def respond(stub: Stubber) -> None:
        stub.add_client_error(
            "request_spot_fleet",
            service_error_code=code,
            service_message=message,
            http_status_code=status,
            expected_params=DRY_RUN_REQUEST,
        )

    return respond


def test_dry_run_allowed_passes() -> None:
    check = spot_fleet_check(
        dry_run_error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)
    )
    assert check == preflight.Check("spot-fleet-api", "pass", "ec2:RequestSpotFleet is allowed (dry run)")


def test_denied_fails_and_suggests_the_auto_scaling_backend() -> None:
    check = spot_fleet_check(dry_run_error("UnauthorizedOperation", DENIED_MESSAGE, 403))
    assert check.status == "fail"
    assert check.detail == (
        "ec2:RequestSpotFleet is denied to this caller (UnauthorizedOperation): a service control policy such as AWS "
        "Control Tower's CT.EC2.PV.6 denies it to every principal of the account, and then every deploy of this "
        "environment fails: set fleet.backend: auto-scaling (or, if only your own IAM policy lacks it, grant "
        f"ec2:RequestSpotFleet); EC2 said: {DENIED_MESSAGE}"
    )


def test_an_invalid_request_is_a_warning() -> None:
    """An answer other than the dry run's two (here EC2 refusing the request itself) cannot tell: warn."""
    check = spot_fleet_check(
        dry_run_error(
            "InvalidSpotFleetRequestConfig", "Parameter: SpotFleetRequestConfig.IamFleetRole is invalid.", 400
        )
    )
    assert check == preflight.Check(
        "spot-fleet-api",
        "warn",
        "could not check: RequestSpotFleet InvalidSpotFleetRequestConfig: Parameter: "
        "SpotFleetRequestConfig.IamFleetRole is invalid.",
    )


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "ExpiredToken", "AuthFailure"])
def test_throttling_and_credentials_stop_the_command(code: str) -> None:
    with pytest.raises(ClientError) as raised:
        spot_fleet_check(dry_run_error(code, "retry later", 400))
    assert raised.value.response["Error"]["Code"] == code


def test_a_request_made_despite_dry_run_fails_with_the_cancel_command() -> None:
    def respond(stub: Stubber) -> None:
        stub.add_response(
            "request_spot_fleet",
            {"SpotFleetRequestId": "sfr-0a1b2c3d-4e5f-6789-abcd-ef0123456789"},
            DRY_RUN_REQUEST,
        )

    check = spot_fleet_check(respond)
    assert check == preflight.Check(
        "spot-fleet-api",
        "fail",
        "EC2 answered the dry run with Spot Fleet request sfr-0a1b2c3d-4e5f-6789-abcd-ef0123456789: cancel it with "
        "`aws ec2 cancel-spot-fleet-requests --terminate-instances --spot-fleet-request-ids "
        "sfr-0a1b2c3d-4e5f-6789-abcd-ef0123456789`",
    )


def test_the_dry_run_request_always_asks_for_a_dry_run() -> None:
    """Whatever the answer, the one call made carries DryRun=True (a recording stand-in for the client)."""
    calls: list[dict[str, Any]] = []

    class RecordingEc2:
        def request_spot_fleet(self, **kwargs: Any) -> Any:
            calls.append(kwargs)
            raise ClientError({"Error": {"Code": "DryRunOperation", "Message": ""}}, "RequestSpotFleet")

    preflight.check_spot_fleet_policy(RecordingEc2(), load_named_environment("dev"))
    assert [call["DryRun"] for call in calls] == [True]


def test_auto_scaling_backend_skips_the_spot_fleet_dry_run() -> None:
    env = with_fleet(load_named_environment("dev"), backend="auto-scaling")
    check = spot_fleet_check(lambda stub: None, env)  # no response queued: any call would fail the test
    assert check == preflight.Check("spot-fleet-api", "pass", "skipped: fleet.backend is auto-scaling")


ROLE_ARN = "arn:aws:iam::123456789012:role/operators/gpufleet-operator"
SESSION_ARN = "arn:aws:sts::123456789012:assumed-role/gpufleet-operator/alice"
CREATE, UPDATE, RUN = "autoscaling:CreateAutoScalingGroup", "autoscaling:UpdateAutoScalingGroup", "ec2:RunInstances"
ACTIONS = [CREATE, UPDATE, RUN]
# What each action's deploy request carries for the tests' dev (us-east-1a, p4d.24xlarge;
# tests/gpufleet/ops/conftest.py) with fleet.backend auto-scaling and tags team and cost-center: the environment tag
# and the file's tags are on the group and on the nodes; the node launch template asks for IMDSv2 only, a hop limit
# of 2 and an encrypted gp3 root volume.
TAGS = {"team": "ml-platform", "cost-center": "research"}
DEV_TAGS = {
    "aws:RequestTag/cost-center": ("string", ["research"]),
    "aws:RequestTag/gpufleet:environment": ("string", ["dev"]),
    "aws:RequestTag/team": ("string", ["ml-platform"]),
}
DEV_REGION = {"aws:RequestedRegion": ("string", ["us-east-1"])}
DEV_CONTEXT = {
    CREATE: {**DEV_REGION, **DEV_TAGS},
    UPDATE: DEV_REGION,
    RUN: {
        **DEV_REGION,
        **DEV_TAGS,
        "ec2:Region": ("string", ["us-east-1"]),
        "ec2:AvailabilityZone": ("string", ["us-east-1a"]),
        "ec2:InstanceType": ("string", ["p4d.24xlarge"]),
        "ec2:MetadataHttpEndpoint": ("string", ["enabled"]),
        "ec2:MetadataHttpTokens": ("string", ["required"]),
        "ec2:MetadataHttpPutResponseHopLimit": ("numeric", ["2"]),
        "ec2:Encrypted": ("boolean", ["true"]),
        "ec2:VolumeType": ("string", ["gp3"]),
    },
}
RUN_CONTEXT_TEXT = (
    "aws:RequestedRegion=us-east-1, ec2:Region=us-east-1, ec2:AvailabilityZone=us-east-1a, "
    "ec2:InstanceType=p4d.24xlarge, ec2:MetadataHttpEndpoint=enabled, ec2:MetadataHttpTokens=required, "
    "ec2:MetadataHttpPutResponseHopLimit=2, ec2:Encrypted=true, ec2:VolumeType=gp3, "
    "aws:RequestTag/cost-center=research, aws:RequestTag/gpufleet:environment=dev, aws:RequestTag/team=ml-platform"
)

Context = dict[str, tuple[str, list[str]]]


def evaluation(
    action: str, decision: str = "allowed", by_organizations: bool = True, missing: tuple[str, ...] = ()
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "EvalActionName": action,
        "EvalResourceName": "*",
        "EvalDecision": decision,
        "OrganizationsDecisionDetail": {"AllowedByOrganizations": by_organizations},
    }
    if missing:
        result["MissingContextValues"] = list(missing)
    return result


class SimulatingIam:
    """An IAM client whose requests botocore builds and validates against the iam model, answered here in whatever
    order they come: GetRole with the operator's role, each SimulatePrincipalPolicy with what `decide` says about its
    action and context (None: AccessDenied). The simulations it saw are in `simulated`, by action."""

    def __init__(self, decide: Callable[[str, Context], dict[str, Any]] | None) -> None:
        self.client = boto3.client("iam", region_name="us-east-1")
        self.decide = decide
        self.simulated: dict[str, Context] = {}
        self.client.meta.events.register("before-parameter-build.iam", self._keep_the_arguments)
        self.client.meta.events.register("before-call.iam", self._answer)

    @staticmethod
    def _keep_the_arguments(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["arguments"] = dict(params)

    def _answer(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        arguments = context["arguments"]
        if model.name == "GetRole":
            assert arguments == {"RoleName": "gpufleet-operator"}
            role = {"Path": "/operators/", "RoleName": "gpufleet-operator", "RoleId": "AROAEXAMPLEEXAMPLE01"}
            return AWSResponse("", 200, HTTPHeaders(), None), {"Role": {**role, "Arn": ROLE_ARN}}
        assert model.name == "SimulatePrincipalPolicy"
        if self.decide is None:
            return AWSResponse("", 403, HTTPHeaders(), None), {"Error": {"Code": "AccessDenied", "Message": "no"}}
        given = {
            entry["ContextKeyName"]: (entry["ContextKeyType"], entry["ContextKeyValues"])
            for entry in arguments.get("ContextEntries", [])
        }
        self.simulated.update({action: given for action in arguments["ActionNames"]})
        assert arguments["PolicySourceArn"] in (ROLE_ARN, "arn:aws:iam::123456789012:user/alice")
        results = [self.decide(action, given) for action in arguments["ActionNames"]]
        return AWSResponse("", 200, HTTPHeaders(), None), {"EvaluationResults": results, "IsTruncated": False}


def auto_scaling_check(
    decide: Callable[[str, Context], dict[str, Any]] | None, caller: str = SESSION_ARN
) -> tuple[preflight.Check, SimulatingIam]:
    iam = SimulatingIam(decide)
    sts = boto3.client("sts", region_name="us-east-1")
    with Stubber(sts) as sts_stub:
        sts_stub.add_response(
            "get_caller_identity", {"UserId": "AROAEXAMPLE:alice", "Account": "123456789012", "Arn": caller}
        )
        env = with_fleet(load_named_environment("dev"), backend="auto-scaling")
        check = preflight.check_auto_scaling_policy(iam.client, sts, with_tags(env, TAGS))
    return check, iam


def allowed(action: str, context: Context) -> dict[str, Any]:
    return evaluation(action)


def test_auto_scaling_actions_allowed_pass() -> None:
    check, _ = auto_scaling_check(allowed)
    assert check == preflight.Check(
        "autoscaling-api",
        "pass",
        f"{CREATE}, {UPDATE}, {RUN} allowed for {ROLE_ARN} (policy simulation with the deploy's request context, "
        "SCPs included)",
    )


def test_each_action_is_simulated_with_the_context_its_deploy_request_carries() -> None:
    _, iam = auto_scaling_check(allowed)
    assert iam.simulated == DEV_CONTEXT


def test_each_context_key_is_one_the_service_authorization_reference_lists_for_its_action() -> None:
    """parliament bundles the Service Authorization Reference: every key preflight gives an action is a condition key
    of that action (any resource type; aws:RequestTag/${TagKey} stands for each tag) or a global key of every request.
    """
    package = importlib.util.find_spec("parliament")  # found, not imported: its import warns (pkg_resources)
    assert package is not None and package.origin is not None
    reference = json.loads((Path(package.origin).parent / "iam_definition.json").read_text())
    services = {service["prefix"]: service for service in reference}
    global_keys = {"aws:RequestedRegion"}
    for action, context in DEV_CONTEXT.items():
        prefix, name = action.split(":")
        (privilege,) = [p for p in services[prefix]["privileges"] if p["privilege"] == name]
        listed = {key for resource in privilege["resource_types"] for key in resource["condition_keys"]}
        for key in context:
            generic = re.sub(r"^aws:RequestTag/.*", "aws:RequestTag/${TagKey}", key)
            assert generic in listed | global_keys, (action, key)


def imdsv2_in_our_regions_scp(action: str, context: Context) -> dict[str, Any]:
    """A common service control policy, evaluated as IAM does: deny ec2:RunInstances unless
    ec2:MetadataHttpTokens is "required" (StringNotEquals), and deny everything outside us-east-1 and us-west-2
    (StringNotEquals on aws:RequestedRegion). A negated operator on a key the request lacks matches: denied."""
    tokens = context.get("ec2:MetadataHttpTokens", ("string", []))[1]
    region = context.get("aws:RequestedRegion", ("string", []))[1]
    denied = (action == RUN and tokens != ["required"]) or region not in (["us-east-1"], ["us-west-2"])
    return evaluation(action, "explicitDeny" if denied else "allowed", by_organizations=not denied)


def test_an_scp_requiring_imdsv2_in_our_regions_allows_the_deploy() -> None:
    """Simulated without the request's context, this SCP would deny every action (issue 19 item 9)."""
    check, _ = auto_scaling_check(imdsv2_in_our_regions_scp)
    assert check.status == "pass", check.detail


def test_a_service_control_policy_denial_fails_with_the_context_it_was_simulated_with() -> None:
    def deny_run_instances(action: str, context: Context) -> dict[str, Any]:
        return evaluation(action, "explicitDeny", by_organizations=False) if action == RUN else evaluation(action)

    check, _ = auto_scaling_check(deny_run_instances)
    assert check == preflight.Check(
        "autoscaling-api",
        "fail",
        "a service control policy denies ec2:RunInstances in account 123456789012: the auto-scaling backend cannot "
        f"deploy here; ask the organisation's administrators (simulated ec2:RunInstances with {RUN_CONTEXT_TEXT})",
    )


def test_a_denial_for_want_of_context_warns_naming_the_keys() -> None:
    def lacks_tag_keys(action: str, context: Context) -> dict[str, Any]:
        if action == RUN:
            return evaluation(action, "implicitDeny", missing=("aws:TagKeys", "ec2:InstanceMarketType"))
        return evaluation(action)

    check, _ = auto_scaling_check(lacks_tag_keys)
    assert check == preflight.Check(
        "autoscaling-api",
        "warn",
        "ec2:RunInstances came out implicitDeny without aws:TagKeys, ec2:InstanceMarketType, which its request "
        "carries but preflight cannot know: check the conditions on those keys by hand",
    )


def test_an_allow_for_want_of_context_warns_too() -> None:
    def lacks_a_key(action: str, context: Context) -> dict[str, Any]:
        return evaluation(action, missing=("autoscaling:MinSize",)) if action == CREATE else evaluation(action)

    check, _ = auto_scaling_check(lacks_a_key)
    assert check == preflight.Check(
        "autoscaling-api",
        "warn",
        "autoscaling:CreateAutoScalingGroup came out allowed without autoscaling:MinSize, which its request carries "
        "but preflight cannot know: check the conditions on those keys by hand",
    )


def test_the_callers_own_iam_denial_warns() -> None:
    def iam_denies_the_group(action: str, context: Context) -> dict[str, Any]:
        return evaluation(action, "implicitDeny") if action != RUN else evaluation(action)

    check, _ = auto_scaling_check(iam_denies_the_group)
    assert check == preflight.Check(
        "autoscaling-api",
        "warn",
        f"{ROLE_ARN} may not call autoscaling:CreateAutoScalingGroup, autoscaling:UpdateAutoScalingGroup (its IAM "
        "policies); fine if the deploy runs under a role that may (CloudFormation's execution role)",
    )


def test_missing_context_and_an_iam_denial_are_both_reported() -> None:
    def both(action: str, context: Context) -> dict[str, Any]:
        if action == UPDATE:
            return evaluation(action, "implicitDeny")
        return evaluation(action, missing=("aws:TagKeys",)) if action == CREATE else evaluation(action)

    check, _ = auto_scaling_check(both)
    assert check == preflight.Check(
        "autoscaling-api",
        "warn",
        "autoscaling:CreateAutoScalingGroup came out allowed without aws:TagKeys, which its request carries but "
        f"preflight cannot know: check the conditions on those keys by hand; {ROLE_ARN} may not call "
        "autoscaling:UpdateAutoScalingGroup (its IAM policies); fine if the deploy runs under a role that may "
        "(CloudFormation's execution role)",
    )


def test_an_iam_user_is_simulated_as_itself() -> None:
    user = "arn:aws:iam::123456789012:user/alice"
    check, iam = auto_scaling_check(allowed, caller=user)
    assert check.status == "pass" and user in check.detail
    assert set(iam.simulated) == set(ACTIONS)


def test_simulation_denied_is_a_warning() -> None:
    check, _ = auto_scaling_check(None)
    assert check == preflight.Check(
        "autoscaling-api", "warn", "could not check: SimulatePrincipalPolicy AccessDenied: no"
    )


def test_the_root_user_cannot_be_simulated() -> None:
    check, iam = auto_scaling_check(allowed, caller="arn:aws:iam::123456789012:root")
    assert check == preflight.Check(
        "autoscaling-api", "warn", "could not check: the root user cannot be simulated; run preflight as a role"
    )
    assert iam.simulated == {}


def test_spot_fleet_backend_skips_the_simulation() -> None:
    iam, sts = boto3.client("iam", region_name="us-east-1"), boto3.client("sts", region_name="us-east-1")
    with Stubber(iam), Stubber(sts):  # no responses queued: any call would fail the test
        check = preflight.check_auto_scaling_policy(iam, sts, load_named_environment("dev"))
    assert check == preflight.Check("autoscaling-api", "pass", "skipped: fleet.backend is spot-fleet")


def test_preflight_reports_a_denied_spot_fleet_end_to_end(stubbed, monkeypatch: pytest.MonkeyPatch, run_json) -> None:
    """The check is in run_checks: the other checks are replaced, EC2 is a Stubber denying the dry run."""
    others = ("check_offering", "check_efa", "check_vcpu_quota", "check_ami", "check_placement_score")
    for name in (*others, "check_spot_price", "check_service_roles"):
        monkeypatch.setattr(preflight, name, lambda *args, name=name: preflight.Check(name, "pass", "stand-in"))
    dry_run_error("UnauthorizedOperation", DENIED_MESSAGE, 403)(stubbed("ec2"))
    code, document = run_json("preflight", "dev")
    assert code == 1 and document["ok"] is False
    checks = {check["name"]: check for check in document["checks"]}
    assert checks["spot-fleet-api"]["status"] == "fail"
    assert "set fleet.backend: auto-scaling" in checks["spot-fleet-api"]["detail"]
    assert checks["autoscaling-api"] == {
        "name": "autoscaling-api",
        "status": "pass",
        "detail": "skipped: fleet.backend is spot-fleet",
    }


@pytest.mark.parametrize(
    ("region", "zone", "role"),
    [
        ("us-east-1", "us-east-1a", "arn:aws:iam::123456789012:role/aws-ec2-spot-fleet-tagging-role"),
        ("cn-north-1", "cn-north-1a", "arn:aws-cn:iam::123456789012:role/aws-ec2-spot-fleet-tagging-role"),
        ("us-gov-west-1", "us-gov-west-1a", "arn:aws-us-gov:iam::123456789012:role/aws-ec2-spot-fleet-tagging-role"),
    ],
)
def test_the_dry_run_names_the_fleet_role_in_the_regions_partition(region, zone, role):
    env = load_named_environment("dev").model_copy(update={"region": region, "availability_zone": zone})
    assert preflight.dry_run_spot_fleet_config(env)["IamFleetRole"] == role
