"""The operator scripts' asset on its own (cdk-nag attached, as `cdk synth` runs it): the archive published under the
key the nodes are given, and the node role's read of that one object."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from gpufleet.errors import GpufleetError
from stacks.constructs.operator_scripts import OperatorScripts
from stacks.environment_stacks import add_compliance_checks
from tests.conftest import CDK_CONTEXT
from tests.stacks.constructs.conftest import ACCOUNT, REGION

ARCHIVE = b"not really a tar archive"
# `printf %s 'not really a tar archive' | sha256sum` is 78a0b1fa...; aws-cdk-lib names a custom-hash asset by the
# SHA-256 of that hash (`printf %s 78a0b1fa... | sha256sum`) and the file's extension.
KEY = "e1ab64c6417854a84abf599a928f46652530be7ec529c8a87f0a2896d8c7053d.gz"
LOCATION = f"s3://cdk-hnb659fds-assets-123456789012-us-east-1/{KEY}"


def synthesize(outdir, location: str) -> dict:
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_compliance_checks(app)
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account=ACCOUNT, region=REGION))
    role = iam.Role(stack, "NodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    OperatorScripts(stack, "OperatorScripts", archive=ARCHIVE, location=location, node_role=role)
    app.synth()  # raises on an unacknowledged cdk-nag finding
    return json.loads((outdir / "Probe.template.json").read_text())["Resources"]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("operator-scripts")
    return outdir, synthesize(outdir, LOCATION)


def test_the_archive_is_an_asset_under_the_key_the_nodes_are_given(published):
    outdir, _ = published
    manifest = json.loads((outdir / "Probe.assets.json").read_text())

    # The other file asset is the template itself.
    (asset,) = [entry for entry in manifest["files"].values() if entry["source"]["path"].startswith("asset.")]
    assert asset["source"] == {"path": f"asset.{KEY[:-3]}.tar.gz", "packaging": "file"}
    (destination,) = asset["destinations"].values()
    assert (destination["bucketName"], destination["objectKey"]) == (
        "cdk-hnb659fds-assets-123456789012-us-east-1",
        KEY,
    )
    assert (outdir / f"asset.{KEY[:-3]}.tar.gz").read_bytes() == ARCHIVE


def test_the_node_role_may_read_that_object_and_nothing_else(published):
    _, resources = published
    (policy,) = [resource for resource in resources.values() if resource["Type"] == "AWS::IAM::Policy"]

    assert policy["Properties"]["Roles"] == [{"Ref": "NodeRoleB5643E21"}]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Action": "s3:GetObject",
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, f":s3:::cdk-hnb659fds-assets-123456789012-us-east-1/{KEY}"],
                ]
            },
        }
    ]


def test_synthesis_fails_where_the_asset_would_land_elsewhere_than_the_nodes_look(tmp_path):
    elsewhere = "s3://cdk-custom-assets-123456789012-us-east-1/" + KEY

    with pytest.raises(GpufleetError) as raised:
        synthesize(tmp_path, elsewhere)

    assert str(raised.value) == (
        f"the operator scripts would be published to {LOCATION}, but the nodes fetch them from {elsewhere}: the app's "
        "stack synthesizer names another assets bucket than gpufleet.constants.CDK_ASSETS_BUCKET, or aws-cdk-lib "
        "names file assets another way than gpufleet/user_data.py expects"
    )
