"""The operator scripts the nodes install at boot (scripts/node/operator-scripts.sh): gpufleet/user_data.py's archive
of scripts/ops as a CDK file asset, which `cdk deploy` publishes to the CDK assets bucket, and the node role's
permission to read that one object."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from gpufleet.errors import GpufleetError

ARCHIVE_NAME = "operator-scripts.tar.gz"


class OperatorScripts(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, archive: bytes, location: str, node_role: iam.IRole
    ) -> None:
        """archive: the bytes the nodes install; location: the s3://BUCKET/KEY their settings name, which this asset
        must be published to."""
        super().__init__(scope, construct_id)
        sha256 = hashlib.sha256(archive).hexdigest()
        # A custom asset hash, the archive's SHA-256, makes the object's key known before synthesis, so the user data
        # can name it (gpufleet/user_data.py operator_scripts_location). The asset is staged (copied into the cloud
        # assembly) while it is constructed, so the file need not outlive this call.
        with tempfile.TemporaryDirectory(prefix="gpufleet-operator-scripts-") as folder:
            path = Path(folder) / ARCHIVE_NAME
            path.write_bytes(archive)
            self.asset = s3_assets.Asset(
                self, "Archive", path=str(path), asset_hash=sha256, asset_hash_type=cdk.AssetHashType.CUSTOM
            )
        published = f"s3://{self.asset.s3_bucket_name}/{self.asset.s3_object_key}"
        if published != location:
            raise GpufleetError(
                f"the operator scripts would be published to {published}, but the nodes fetch them from {location}: "
                "the app's stack synthesizer names another assets bucket than gpufleet.constants.CDK_ASSETS_BUCKET, or "
                "aws-cdk-lib names file assets another way than gpufleet/user_data.py expects"
            )
        # No kms:Decrypt: the bootstrap bucket's default key lets every principal of the account use it through S3
        # (aws-cdk lib/api/bootstrap/bootstrap-template.yaml, FileAssetsBucketEncryptionKey: Principal "*" with
        # kms:CallerAccount and kms:ViaService s3.REGION.amazonaws.com), and a key policy that names the principal
        # needs no IAM permission beside it (KMS developer guide, key-policies). A bootstrap with a customer key of
        # its own (--bootstrap-kms-key-id) needs a grant to the node role (unconfirmed which).
        iam.Policy(
            self,
            "NodesReadTheArchive",
            roles=[node_role],
            statements=[
                iam.PolicyStatement(
                    actions=["s3:GetObject"],
                    resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{self.asset.s3_bucket_name}/{self.asset.s3_object_key}"],
                )
            ],
        )
