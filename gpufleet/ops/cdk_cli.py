"""The CDK CLI as `gpufleet up` and `gpufleet down` run it: found in the checkout, run in it for one environment, its
output passed on line by line.

- The CLI is the one `make setup` installs from package-lock.json (node_modules/.bin/cdk in the checkout): npm's
  `latest` (3.x) cannot read this aws-cdk-lib's cloud assembly (README). GPUFLEET_CDK overrides it with a command line
  (split as a shell splits words), which is how the tests put a stand-in there.
- `-c env=NAME` makes app.py synthesize that environment's stacks only, so `--all` deploys and destroys exactly them
  (app.py).
- The bootstrap: every synthesized template has the parameter BootstrapVersion, an SSM parameter type defaulting to
  /cdk-bootstrap/hnb659fds/version (hnb659fds: the default qualifier), and the rule CheckBootstrapVersion, which fails
  the deploy unless that version is 6 or more (the rule's Fn::Not of Fn::Contains ["1", ..., "5"] in every template
  of cdk.out; CDK developer guide, "Bootstrapping your environment for use with the AWS CDK"). `cdk bootstrap
  aws://ACCOUNT/REGION` creates or upgrades the CDKToolkit stack that writes it.
- `--import-existing-resources` (deploy; aws-cdk CLI 2.1148.1's `cdk deploy --help`) sets CloudFormation's
  ImportExistingResources on the change set: a resource of the template with a static custom name and DeletionPolicy
  Retain that already exists in the account, and belongs to no stack, is imported instead of created (CloudFormation
  user guide, import-resources-automatically.html). The storage stack's bucket is such a resource: `gpufleet down
  --keep-data` leaves it, and the next `up` takes it back this way.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.errors import GpufleetError

CDK_VARIABLE = "GPUFLEET_CDK"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6
PROJECT_FILES = ("cdk.json", "app.py")


def project_root(directory: Path | None = None) -> Path:
    """The gpufleet checkout the CDK app runs from: the current directory, which must hold cdk.json and app.py."""
    root = directory or Path.cwd()
    missing = [name for name in PROJECT_FILES if not (root / name).is_file()]
    if missing:
        raise GpufleetError(
            f"{root}: no {' or '.join(missing)} here: run gpufleet up and down from the root of the gpufleet "
            "checkout, where the CDK app is"
        )
    return root


def cdk_command(root: Path) -> list[str]:
    """The CDK CLI's command line: GPUFLEET_CDK, else the checkout's pinned CLI."""
    configured = os.environ.get(CDK_VARIABLE, "").strip()
    if configured:
        return shlex.split(configured)
    pinned = root / "node_modules" / ".bin" / "cdk"
    if not os.access(pinned, os.X_OK):
        raise GpufleetError(
            f"{pinned}: the pinned CDK CLI is not installed: run `make setup` in {root} (it runs npm ci), or set "
            f"{CDK_VARIABLE} to a CDK CLI's command line"
        )
    return [str(pinned)]


def bootstrap_needed(version: str | None) -> bool:
    """Whether the account and region need `cdk bootstrap`: no version parameter, or one below MIN_BOOTSTRAP_VERSION
    (a value that is no number counts as none)."""
    if version is None or not version.strip().isdigit():
        return True
    return int(version) < MIN_BOOTSTRAP_VERSION


def deploy_arguments(environment: str) -> list[str]:
    return [
        "deploy",
        "--all",
        "-c",
        f"env={environment}",
        "--require-approval",
        "never",
        "--import-existing-resources",
        "--progress",
        "events",
    ]


def destroy_arguments(environment: str, stacks: Sequence[str]) -> list[str]:
    return ["destroy", "-c", f"env={environment}", "--force", *stacks]


def bootstrap_arguments(account: str, region: str) -> list[str]:
    return ["bootstrap", f"aws://{account}/{region}"]


def run_cdk(
    root: Path,
    arguments: Sequence[str],
    *,
    echo: Callable[[str], None],
    environment: dict[str, str] | None = None,
) -> None:
    """Run the CDK CLI with ARGUMENTS in ROOT, handing each line it prints to ECHO as it comes; fails with the CLI's
    exit status in one line."""
    command = [*cdk_command(root), *arguments]
    try:
        process = subprocess.Popen(
            command,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(environment or {})},
        )
    except OSError as error:
        raise GpufleetError(f"cannot run the CDK CLI ({shlex.join(command[:1])}): {error.strerror}") from None
    assert process.stdout is not None, "stdout is a pipe"
    with process:
        for line in process.stdout:
            echo(line.rstrip("\n"))
    if process.returncode != 0:
        raise GpufleetError(
            f"cdk {arguments[0]} failed (exit status {process.returncode}): its messages are above",
            exit_code=1,
        )
