"""AWS as the box's nodes and the operator see it: moto's server run as a process of its own (tests/box/aws_server.py),
plain HTTP on 127.0.0.1 for boto3 and the `gpufleet` console script (AWS_ENDPOINT_URL), HTTPS at the box's endpoint
address (.2 of the subnet, in the switch namespace) for the nodes' real AWS CLI, which finds it by the real endpoint
names through the box's DNS and trusts it through the box's CA in the node's trust store.

The names registered are the regional endpoints of the services the node side calls (scripts/node/*.sh: ec2
create-tags and get-console-output, s3 cp, secretsmanager get-secret-value, autoscaling complete-lifecycle-action;
gpufleet/ops/runs.py: s3 cp of a run's work directory; the CloudWatch agent's logs; ssm; sts), the global names S3 and
STS still answer to, and the virtual-hosted names of the buckets the nodes read (BUCKET.s3.REGION.amazonaws.com, and
BUCKET.s3.amazonaws.com for us-east-1's global endpoint). The box's resolver has no wildcards: a bucket needs its
names registered (`buckets`, add_buckets(), or created through client("s3"), which registers them); the server's
certificate covers every bucket through *.s3.REGION.amazonaws.com.

Usage:

    with AwsEmulator(box, ["us-east-1"], buckets=["cdk-hnb659fds-assets-123456789012-us-east-1"]) as aws:
        aws.client("s3").put_object(...)
        subprocess.run(["gpufleet", "status", "dev"], env={**os.environ, **aws.environment()})
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.box.nodes import Box, BoxError

REPOSITORY = Path(__file__).resolve().parent.parent.parent
# What the server process runs with: the project's virtualenv (make setup), else this interpreter.
VENV_PYTHON = REPOSITORY / ".venv" / "bin" / "python"
START_SECONDS = 60
STOP_SECONDS = 10
# The services whose regional endpoints the node side calls (module docstring).
SERVICES = ("ec2", "s3", "secretsmanager", "autoscaling", "logs", "ssm", "sts")
# Global endpoints: S3's us-east-1 endpoint (botocore's legacy us_east_1_regional_endpoint) and STS's.
GLOBAL_NAMES = ("s3.amazonaws.com", "sts.amazonaws.com")
# Any key works with moto; these are what the host side signs with.
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"
# Where Debian's AWS CLI finds its CA bundle: its botocore imports certifi (awscli/botocore/httpsession.py), and
# Debian's python3-certifi answers the system bundle (certifi/core.py: DEBIAN_CA_CERTS_PATH).
NODE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def endpoint_names(regions: Sequence[str], buckets: Sequence[str] = ()) -> list[str]:
    names = [f"{service}.{region}.amazonaws.com" for region in regions for service in SERVICES]
    names += list(GLOBAL_NAMES)
    names += bucket_names(regions, buckets)
    return list(dict.fromkeys(names))


def bucket_names(regions: Sequence[str], buckets: Sequence[str]) -> list[str]:
    names = [f"{bucket}.s3.{region}.amazonaws.com" for bucket in buckets for region in regions]
    names += [f"{bucket}.s3.amazonaws.com" for bucket in buckets]
    return names


def instance_credentials(role: str, account: str = "123456789012") -> dict[str, Any]:
    """The meta-data `iam` tree of a node with instance profile ROLE (tests/box/imds.py's state): temporary
    credentials in the JSON shape EC2 serves at iam/security-credentials/ROLE, which botocore's InstanceMetadataFetcher
    reads, and iam/info. moto accepts any key."""
    updated = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = updated.strftime("%Y-%m-%dT%H:%M:%SZ")
    credentials = {
        "Code": "Success",
        "LastUpdated": stamp,
        "Type": "AWS-HMAC",
        "AccessKeyId": "ASIABOXNODE000000000",
        "SecretAccessKey": "box-node-secret-access-key",
        "Token": "box-node-session-token",
        "Expiration": (updated + dt.timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    info = {
        "Code": "Success",
        "LastUpdated": stamp,
        "InstanceProfileArn": f"arn:aws:iam::{account}:instance-profile/{role}",
        "InstanceProfileId": "AIPABOXNODE000000000",
    }
    return {"info": json.dumps(info, indent=2), "security-credentials": {role: json.dumps(credentials, indent=2)}}


class AwsEmulator:
    """The box's AWS (module docstring). REGIONS: the regions the nodes call (the first is the host side's default);
    BUCKETS: the buckets the nodes reach by their virtual-hosted names."""

    def __init__(self, box: Box, regions: Sequence[str], buckets: Sequence[str] = ()) -> None:
        if not regions:
            raise ValueError("AwsEmulator needs at least one region")
        self.box = box
        self.regions = list(regions)
        self.buckets = list(buckets)
        self.directory = box.directory / "aws"
        self.process: subprocess.Popen | None = None
        self._url = ""

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def start(self) -> None:
        """Start the server, wait until both listeners listen, then let the box's DNS answer the endpoint names."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = endpoint_names(self.regions, self.buckets)
        names_file = self.directory / "names"
        names_file.write_text("".join(f"{name}\n" for name in names))
        ready = self.directory / "ready.json"
        ready.unlink(missing_ok=True)
        python = VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)
        argv = [
            str(python),
            "-m",
            "tests.box.aws_server",
            f"--box-dir={self.box.directory}",
            f"--switch-netns={self.box.switch}",
            f"--endpoint-address={self.box.endpoint_address}",
            f"--names-file={names_file}",
            f"--ready-file={ready}",
            *(f"--region={region}" for region in self.regions),
        ]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=REPOSITORY,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_SECONDS
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                reason = f"exited {self.process.returncode}" if self.process.returncode is not None else "timed out"
                self.stop()
                raise BoxError(f"the AWS emulator did not start ({reason}); its log:\n{self.log_tail()}")
            time.sleep(0.05)
        self._url = json.loads(ready.read_text())["url"]
        self.box.add_names(self.box.endpoint_address, names)

    def add_buckets(self, buckets: list[str]) -> None:
        """Let the nodes reach BUCKETS by their virtual-hosted names too."""
        new = [bucket for bucket in buckets if bucket not in self.buckets]
        self.buckets += new
        if new:
            self.box.add_names(self.box.endpoint_address, bucket_names(self.regions, new))

    def log_tail(self, characters: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-characters:]
        except FileNotFoundError:
            return "(no log)"

    @property
    def url(self) -> str:
        """The plain HTTP endpoint on 127.0.0.1, for the host side."""
        if not self._url:
            raise BoxError("the AWS emulator is not started")
        return self._url

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the HTTPS endpoint's certificate, PEM."""
        return (self.directory / "ca.pem").read_bytes()

    def node_trust_files(self, lower: Sequence[Path] | None = None) -> dict[str, tuple[bytes, int]]:
        """A node's upper_files entry that makes its AWS CLI trust the endpoint: the image's CA bundle (from the first
        of the LOWER layers that has one, the box's by default) with the box's CA appended."""
        relative = NODE_CA_BUNDLE.lstrip("/")
        layers = list(self.box.lower if lower is None else lower)
        bundle = next((layer / relative for layer in layers if (layer / relative).is_file()), None)
        if bundle is None:
            raise BoxError(f"no {NODE_CA_BUNDLE} in the node's layers {layers}")
        content = bundle.read_bytes()
        if content and not content.endswith(b"\n"):
            content += b"\n"
        return {NODE_CA_BUNDLE: (content + self.ca_pem, 0o644)}

    def environment(self) -> dict[str, str]:
        """What a process on the host (the `gpufleet` console script, boto3) needs to reach the emulator and only it."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": self.regions[0],
            "AWS_REGION": self.regions[0],
            # No profile, no shared credentials, no instance metadata of the host's.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, service: str, region: str | None = None) -> Any:
        """A boto3 client of SERVICE on the host side. A bucket an S3 client creates gets its virtual-hosted names in
        the box's DNS (add_buckets)."""
        import boto3

        client = boto3.client(
            service,
            endpoint_url=self.url,
            region_name=region or self.regions[0],
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )
        if service == "s3":
            client.meta.events.register(
                "before-parameter-build.s3.CreateBucket", lambda params, **_: self.add_buckets([params["Bucket"]])
            )
        return client

    def stop(self) -> None:
        """Stop the server (safe to call twice). Commands it started on nodes stay theirs, as the agent's children
        stay when the agent stops (KillMode=process); the box's power-off ends them."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_SECONDS)

    def __enter__(self) -> AwsEmulator:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
