"""Preflight's account-rules checks (issue 11 item 5) with botocore Stubber: a dry-run RequestSpotFleet for the
spot-fleet backend, an IAM policy simulation for the auto-scaling backend.

Every Stubber response for request_spot_fleet pins the exact request, DryRun=True included: a request without it
fails the test. The auto-scaling environment is dev with fleet.backend changed
(tests/gpufleet/ops/variants.py).
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from gpufleet.loading import load_named_environment
from gpufleet.ops import preflight
from tests.gpufleet.ops.variants import with_fleet

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
ACTIONS = ["autoscaling:CreateAutoScalingGroup", "autoscaling:UpdateAutoScalingGroup", "ec2:RunInstances"]


def evaluation(action: str, decision: str = "allowed", by_organizations: bool = True) -> dict[str, Any]:
    return {
        "EvalActionName": action,
        "EvalResourceName": "*",
        "EvalDecision": decision,
        "OrganizationsDecisionDetail": {"AllowedByOrganizations": by_organizations},
    }


def auto_scaling_check(results: list[dict[str, Any]] | None, caller: str = SESSION_ARN) -> preflight.Check:
    """Stubber on STS and IAM: the caller, its role (iam:GetRole gives the ARN with its path), the simulation."""
    iam = boto3.client("iam", region_name="us-east-1")
    sts = boto3.client("sts", region_name="us-east-1")
    with Stubber(iam) as iam_stub, Stubber(sts) as sts_stub:
        sts_stub.add_response(
            "get_caller_identity", {"UserId": "AROAEXAMPLE:alice", "Account": "123456789012", "Arn": caller}
        )
        if caller == SESSION_ARN:
            iam_stub.add_response(
                "get_role",
                {
                    "Role": {
                        "Path": "/operators/",
                        "RoleName": "gpufleet-operator",
                        "RoleId": "AROAEXAMPLEEXAMPLE01",
                        "Arn": ROLE_ARN,
                        "CreateDate": "2025-01-01T00:00:00Z",
                    }
                },
                {"RoleName": "gpufleet-operator"},
            )
        if results is None:
            iam_stub.add_client_error(
                "simulate_principal_policy",
                service_error_code="AccessDenied",
                service_message="no",
                http_status_code=403,
            )
        elif caller != "arn:aws:iam::123456789012:root":
            iam_stub.add_response(
                "simulate_principal_policy",
                {"EvaluationResults": results, "IsTruncated": False},
                {"PolicySourceArn": ROLE_ARN if caller == SESSION_ARN else caller, "ActionNames": ACTIONS},
            )
        env = with_fleet(load_named_environment("dev"), backend="auto-scaling")
        check = preflight.check_auto_scaling_policy(iam, sts, env)
        iam_stub.assert_no_pending_responses()
    return check


def test_auto_scaling_actions_allowed_pass() -> None:
    check = auto_scaling_check([evaluation(action) for action in ACTIONS])
    assert check == preflight.Check(
        "autoscaling-api",
        "pass",
        f"{', '.join(ACTIONS)} allowed for {ROLE_ARN} (policy simulation, SCPs included)",
    )


def test_a_service_control_policy_denial_fails() -> None:
    results = [
        evaluation(ACTIONS[0]),
        evaluation(ACTIONS[1]),
        evaluation("ec2:RunInstances", "explicitDeny", by_organizations=False),
    ]
    check = auto_scaling_check(results)
    assert check == preflight.Check(
        "autoscaling-api",
        "fail",
        "a service control policy denies ec2:RunInstances in account 123456789012: the auto-scaling backend cannot "
        "deploy here; ask the organisation's administrators",
    )


def test_the_callers_own_iam_denial_warns() -> None:
    results = [evaluation(ACTIONS[0], "implicitDeny"), evaluation(ACTIONS[1], "implicitDeny"), evaluation(ACTIONS[2])]
    check = auto_scaling_check(results)
    assert check == preflight.Check(
        "autoscaling-api",
        "warn",
        f"{ROLE_ARN} may not call autoscaling:CreateAutoScalingGroup, autoscaling:UpdateAutoScalingGroup (its IAM "
        "policies); fine if the deploy runs under a role that may (CloudFormation's execution role)",
    )


def test_an_iam_user_is_simulated_as_itself() -> None:
    user = "arn:aws:iam::123456789012:user/alice"
    check = auto_scaling_check([evaluation(action) for action in ACTIONS], caller=user)
    assert check.status == "pass" and user in check.detail


def test_simulation_denied_is_a_warning() -> None:
    check = auto_scaling_check(None)
    assert check == preflight.Check(
        "autoscaling-api", "warn", "could not check: SimulatePrincipalPolicy AccessDenied: no"
    )


def test_the_root_user_cannot_be_simulated() -> None:
    check = auto_scaling_check([], caller="arn:aws:iam::123456789012:root")
    assert check == preflight.Check(
        "autoscaling-api", "warn", "could not check: the root user cannot be simulated; run preflight as a role"
    )


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
