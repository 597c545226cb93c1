"""The model of the AMI pipeline's configuration (ami/pipeline.yaml): a frozen object.

Parsing checks shape, types and the rules about one field alone (pydantic, unknown keys rejected); the rules beyond
that are validators (gpufleet.validators.pipeline), and gpufleet.loading reads the file and runs both, so a user sees
every problem at once, one line each: ``FILE: FIELD: problem (what is allowed)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from gpufleet.ami import published_profile
from gpufleet.environment import Environment, _resource_id_problem
from gpufleet.rules import OPENPGP_FINGERPRINT, AccountId, LogRetentionDays, RegionName, checked

# The rules about one field alone, checked while parsing (gpufleet.rules.checked): each returns the problem or None.

# EventBridge cron: minutes hours day-of-month month day-of-week year; one of the two days fields is '?'
# (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html#eb-cron-expressions).
CRON_PATTERN = re.compile(r"cron\((\S+) (\S+) (\S+) (\S+) (\S+) (\S+)\)")
# source: https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html
# ("Update your Session Manager plugin to version 1.2.764.0 or later")
OLDEST_SESSION_MANAGER_PLUGIN = (1, 2, 764, 0)
# The acceptance gate's bounds. Two nodes are the fewest a multi-node all_reduce runs on; eight keep a gate's bill
# small whatever the instance type. Fifteen minutes cover a deploy and a short nccl-tests run (an estimate: no
# published figure); eight hours are far above any acceptance run and keep a build within CodeBuild's 36-hour limit.
ACCEPTANCE_NODES = (2, 8)
ACCEPTANCE_TIMEOUT_MINUTES = (15, 480)
ACCEPTANCE_MAX_COST_USD = (1, 5000)
# What the nodes may live beyond timeout_minutes: the stack deletion after the gate (the Auto Scaling group's
# instances are terminated first; an estimate, not a documented figure). Counted in the cost bound and in the build's
# timeout, so that CodeBuild never stops a build during its own teardown.
ACCEPTANCE_TEARDOWN_MINUTES = 30


def _schedule_problem(schedule: str) -> str | None:
    match = CRON_PATTERN.fullmatch(schedule)
    if match is None:
        return (
            f"'{schedule}' is not an EventBridge cron expression (six fields: "
            "cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 6 ? * SUN *); "
            "or null for manual builds only)"
        )
    day_of_month, day_of_week = match.group(3), match.group(5)
    if (day_of_month == "?") == (day_of_week == "?"):
        return (
            f"'{schedule}' needs '?' in exactly one of day-of-month and day-of-week "
            "(e.g. cron(0 6 ? * SUN *) or cron(0 6 1 * ? *))"
        )
    return None


def _subnet_problem(subnet: str) -> str | None:
    if not re.fullmatch(r"subnet-[0-9a-f]{8}([0-9a-f]{9})?", subnet):
        return f"'{subnet}' is not a subnet id (subnet- followed by 8 or 17 hex digits; or null for the default VPC)"
    return None


def _packer_version_problem(version: str) -> str | None:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version)
    if match is None:
        return f"'{version}' is not an exact Packer release (MAJOR.MINOR.PATCH, e.g. 1.11.2)"
    if (int(match.group(1)), int(match.group(2))) < (1, 7):
        return f"{version} is too old: the rendered templates need Packer 1.7 or newer (packer init, required_plugins)"
    return None


def _fingerprint_problem(fingerprint: str) -> str | None:
    if not OPENPGP_FINGERPRINT.fullmatch(fingerprint):
        return (
            f"'{fingerprint}' is not an OpenPGP fingerprint (40 upper-case hex digits, no spaces; "
            "HashiCorp's is listed on https://www.hashicorp.com/security)"
        )
    return None


def _session_manager_plugin_problem(version: str) -> str | None:
    if not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", version):
        return f"'{version}' is not an exact session-manager-plugin release (four numbers, e.g. 1.2.764.0)"
    if tuple(map(int, version.split("."))) < OLDEST_SESSION_MANAGER_PLUGIN:
        oldest = ".".join(map(str, OLDEST_SESSION_MANAGER_PLUGIN))
        return (
            f"{version} is older than {oldest}, the oldest release Session Manager supports "
            f"(use {oldest} or newer; releases: https://docs.aws.amazon.com/systems-manager/"
            "latest/userguide/plugin-version-history.html)"
        )
    return None


def _between(low: int, high: int, unit: str) -> Callable[[float], str | None]:
    def problem(value: float) -> str | None:
        if not low <= value <= high:
            return f"{value} is out of range (from {low} to {high} {unit})"
        return None

    return problem


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Packer(_Section):
    """The Packer release the build downloads from releases.hashicorp.com, and how the download is checked."""

    version: Annotated[StrictStr, checked(_packer_version_problem)] = Field(
        description="Exact Packer release, e.g. 1.11.2 (>= 1.7: the templates use packer {})."
    )
    sha256: StrictStr | None = Field(
        description="SHA-256 of packer_VERSION_linux_amd64.zip as listed in packer_VERSION_SHA256SUMS; null to rely "
        "on the signed SHA256SUMS alone."
    )
    signing_key_fingerprint: Annotated[StrictStr, checked(_fingerprint_problem)] = Field(
        description="Fingerprint of HashiCorp's release key; the build checks the signature of SHA256SUMS with it."
    )


class SessionManagerPlugin(_Section):
    """The templates reach the build instance through SSM Session Manager, which needs this plugin next to Packer."""

    version: Annotated[StrictStr, checked(_session_manager_plugin_problem)] = Field(
        description="Exact release of the AWS session-manager-plugin, 1.2.764.0 or newer."
    )


class Acceptance(_Section):
    """The acceptance gate: a short-lived cluster of the new image runs `gpufleet acceptance` before it is published."""

    instance_type: StrictStr = Field(
        description="Instance type of the test nodes: an EFA type of the catalog (gpufleet/instance_types.yaml)."
    )
    availability_zone: StrictStr = Field(description="AZ of the test nodes, in the pipeline's region.")
    vpc_id: Annotated[StrictStr, checked(_resource_id_problem("vpc"))] = Field(
        description="Existing VPC the test nodes borrow (vpc-...): the gate creates no network."
    )
    subnet_id: Annotated[StrictStr, checked(_resource_id_problem("subnet"))] = Field(
        description="Existing private subnet in availability_zone with outbound HTTPS (NAT or VPC endpoints)."
    )
    nodes: Annotated[StrictInt, checked(_between(*ACCEPTANCE_NODES, "nodes"))] = Field(
        description="On-demand test nodes, 2 to 8."
    )
    timeout_minutes: Annotated[StrictInt, checked(_between(*ACCEPTANCE_TIMEOUT_MINUTES, "minutes"))] = Field(
        description="How long the deploy and the acceptance run may take together before the gate fails, 15 to 480."
    )
    max_cost_usd: Annotated[StrictInt | StrictFloat, checked(_between(*ACCEPTANCE_MAX_COST_USD, "USD"))] = Field(
        description="Most the test nodes may cost (nodes x on-demand price x (timeout_minutes + 30) / 60), checked "
        "against the live on-demand price before any launch, 1 to 5000."
    )

    @property
    def node_minutes_bound(self) -> int:
        """The longest the test nodes can live: the gate's timeout and then the teardown."""
        return self.timeout_minutes + ACCEPTANCE_TEARDOWN_MINUTES

    def cost_bound(self, node_hourly_usd: Decimal) -> Decimal:
        """The most the test nodes can cost at NODE_HOURLY_USD each."""
        return self.nodes * node_hourly_usd * self.node_minutes_bound / 60


class Pipeline(_Section):
    account: AccountId | None = Field(
        None,
        description="AWS account id of the pipeline and its images, 12 digits, quoted; null or absent: the account "
        "the pipeline is deployed from (the CDK CLI's CDK_DEFAULT_ACCOUNT, from the caller's credentials).",
    )
    region: RegionName = Field(
        description="Region the images are built and published in (one the pinned botocore lists), e.g. us-east-1."
    )
    profiles: tuple[StrictStr, ...] = Field(description="AMI profiles (ami/profiles/NAME.yaml) the schedule builds.")
    schedule: Annotated[StrictStr, checked(_schedule_problem)] | None = Field(
        description="EventBridge cron expression for scheduled builds, e.g. cron(0 6 ? * SUN *); null: manual only."
    )
    log_retention_days: LogRetentionDays = Field(description="Days CloudWatch Logs keeps build logs.")
    subnet_id: Annotated[StrictStr, checked(_subnet_problem)] | None = Field(
        description="Subnet Packer launches the build instance into (outbound HTTPS needed); null: the default VPC."
    )
    packer: Packer
    session_manager_plugin: SessionManagerPlugin
    acceptance: Acceptance | None = Field(
        description="The acceptance gate on real nodes before publishing (see docs/guides/ami-pipeline.md); null: off."
    )


def pipeline_account(pipeline: Pipeline, deploying_account: str | None) -> str | None:
    """The account the pipeline stack deploys to: ami/pipeline.yaml's account where it names one, else the deploying
    account (CDK_DEFAULT_ACCOUNT, which the CDK CLI sets from the caller's credentials; synthesis itself makes no AWS
    call); None when neither is known (a synthesis without credentials)."""
    return pipeline.account or deploying_account


def account_mismatch(pipeline: Pipeline, deploying_account: str | None) -> str | None:
    """The warning line when ami/pipeline.yaml pins an account other than the one deploying (CDK_DEFAULT_ACCOUNT):
    the stack targets the pinned account, and deploying it needs that account's credentials."""
    if pipeline.account is None or deploying_account is None or pipeline.account == deploying_account:
        return None
    return (
        f"ami/pipeline.yaml: account: {pipeline.account} is not the account you deploy from ({deploying_account}, "
        f"CDK_DEFAULT_ACCOUNT): gpufleet-ami-pipeline deploys only with credentials of {pipeline.account} (remove "
        "account to build the images in the account you deploy from)"
    )


def publish_regions(
    pipeline: Pipeline, environments: list[Environment], account: str | None = None
) -> dict[str, tuple[str, ...]]:
    """Where each profile of the pipeline is published: its build region first, then (sorted) the region of every
    environment that reads /gpufleet/ami/PROFILE in the pipeline's account (ACCOUNT, else ami/pipeline.yaml's). AMIs
    and SSM parameters are regional, so a build copies its image to those regions and writes the parameter in each.
    An environment of another account or reading an unlisted profile gets nothing here (a pipeline deployed in that
    account publishes there); gpufleet.validators.image.PublishedImageValidator reports the unlisted profile, and
    the other account where ami/pipeline.yaml pins one."""
    account = account or pipeline.account
    regions = {profile: [pipeline.region] for profile in pipeline.profiles}
    for environment in environments:
        profile = published_profile(environment.image_parameter)
        if profile not in regions or environment.account != account:
            continue
        if environment.region not in regions[profile]:
            regions[profile].append(environment.region)
    return {profile: (home, *sorted(others)) for profile, (home, *others) in regions.items()}


def acceptance_environment(pipeline: Pipeline, name: str, image_id: str, account: str | None = None) -> dict:
    """The environment file of the gate's short-lived cluster: the new image on on-demand nodes (no spot: an
    interruption would fail the gate for nothing), in the gate's borrowed network (no network stack), with no storage
    and no fleet options, so that its only stack is the cluster, named gpufleet-NAME-cluster. Auto Scaling: deleting
    the group terminates its instances (a Spot Fleet's deletion may leave them: gpu-cluster-facts.md)."""
    gate = pipeline.acceptance
    if gate is None:
        raise ValueError("the pipeline has no acceptance gate")
    account = account or pipeline.account
    if account is None:
        raise ValueError("the pipeline's account is not known: give it (the build's own account)")
    return {
        "name": name,
        "account": account,
        "region": pipeline.region,
        "availability_zone": gate.availability_zone,
        "network": {"vpc_id": gate.vpc_id, "subnet_id": gate.subnet_id},
        "instance_type": gate.instance_type,
        "capacity": {"target": gate.nodes, "on_demand": gate.nodes},
        "fleet": {"backend": "auto-scaling"},
        "ami": {"id": image_id},
        "tags": {"purpose": "ami-acceptance"},
    }
