"""Environment files (environments/NAME.yaml) parsed into frozen, typed objects.

Parsing checks shape, types and the values a choice field allows (pydantic, unknown keys rejected everywhere); the
rules that need more than one field or outside knowledge live in gpufleet.validators, one class per rule.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from gpufleet.config_file import read_model
from gpufleet.errors import GpufleetError
from gpufleet.rules import choice_problem
from gpufleet.validators import (
    ALLOCATION_STRATEGIES,
    FLEET_TYPES,
    ON_DEMAND_ALLOCATION_STRATEGIES,
    REPLACEMENT_STRATEGIES,
    ROLLOUT_MANUAL,
    ROLLOUT_REPLACE_ALL,
    ROLLOUTS,
    validate_environment,
)

if TYPE_CHECKING:
    from gpufleet.ami.pipeline import Pipeline

ENVIRONMENTS_DIR_VARIABLE = "GPUFLEET_ENVIRONMENTS_DIR"
WHERE_ENVIRONMENTS_ARE = f"run gpufleet where environments/ is, or set {ENVIRONMENTS_DIR_VARIABLE}"
# Tag on every resource and node of an environment; operator tools and IAM conditions select by it.
ENVIRONMENT_TAG_KEY = "gpufleet:environment"
# How a new node image reaches a fleet (fleet.rollout): see Fleet.image_rollout.


def _one_of(what: str, choices: tuple[str, ...]) -> AfterValidator:
    """A choice field's check while parsing, with the line a validator would print (FILE: FIELD: MESSAGE)."""

    def check(value: str) -> str:
        problem = choice_problem(value, what, choices)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Network(_Section):
    """Either a new VPC (cidr) or an existing VPC and subnet (vpc_id + subnet_id)."""

    cidr: StrictStr | None = Field(None, description="CIDR of a new VPC, e.g. 10.40.0.0/16 (at least /24).")
    nat_gateway: StrictBool = Field(False, description="Add a public subnet and one NAT gateway for outbound internet.")
    flow_log_retention_days: StrictInt = Field(90, description="Days to keep VPC flow logs in CloudWatch Logs.")
    vpc_id: StrictStr | None = Field(None, description="Existing VPC id (vpc-...), instead of cidr.")
    subnet_id: StrictStr | None = Field(None, description="Existing private subnet id (subnet-...) in the cluster AZ.")

    @property
    def creates_vpc(self) -> bool:
        return self.cidr is not None

    @property
    def node_subnet_prefix(self) -> int:
        """The node subnet takes half of a new VPC: every interface with an ENA device takes an address."""
        return ipaddress.IPv4Network(self.cidr).prefixlen + 1


class Capacity(_Section):
    target: StrictInt = Field(description="Number of nodes the fleet keeps running.")
    on_demand: StrictInt = Field(0, description="How many of the target nodes are on-demand (the rest are spot).")

    @property
    def spot(self) -> int:
        return self.target - self.on_demand


class CapacityRebalance(_Section):
    replacement_strategy: Annotated[
        StrictStr, _one_of("a capacity rebalance replacement strategy", REPLACEMENT_STRATEGIES)
    ] = Field("launch", description="launch | launch-before-terminate (as the EC2 API spells them).")
    termination_delay_seconds: StrictInt | None = Field(
        None, description="120-7200; only with launch-before-terminate."
    )


class Fallback(_Section):
    """Spot first, on-demand when spot is not there, spot again when it returns (gpufleet.fallback says how)."""

    after_minutes: StrictInt = Field(
        15, description="A spot shortfall lasting this long raises the on-demand part by the shortfall."
    )
    restore_after_minutes: StrictInt = Field(
        30,
        description="Spot capacity back this long gives one extra on-demand node back to spot; one node per period, "
        "down to capacity.on_demand.",
    )
    max_extra_on_demand: StrictInt = Field(2, description="Ceiling on the extra on-demand nodes.")


class Fleet(_Section):
    type: Annotated[StrictStr, _one_of("a fleet type", FLEET_TYPES)] = Field(
        "maintain", description="maintain (replace interrupted nodes) | request (one-shot)."
    )
    allocation_strategy: Annotated[StrictStr, _one_of("a spot allocation strategy", ALLOCATION_STRATEGIES)] = Field(
        "priceCapacityOptimized", description="Spot allocation strategy, spelled as the EC2 Spot Fleet API spells it."
    )
    on_demand_allocation_strategy: Annotated[
        StrictStr, _one_of("an on-demand allocation strategy", ON_DEMAND_ALLOCATION_STRATEGIES)
    ] = Field("lowestPrice", description="lowestPrice | prioritized.")
    capacity_rebalance: CapacityRebalance | None = Field(
        None, description="Launch a replacement when EC2 signals an elevated interruption risk (maintain only)."
    )
    valid_until: dt.datetime | None = Field(
        None, description="Time (UTC) after which the fleet stops; its nodes are terminated."
    )
    replace_unhealthy_instances: StrictBool = Field(True, description="Replace nodes that fail EC2 status checks.")
    rollout: Annotated[StrictStr, _one_of("an image rollout", ROLLOUTS)] | None = Field(
        None,
        description="What a new node image does to a maintain fleet: manual (the default: a new launch template "
        "version; running nodes keep their image until they are replaced) | replace-all (a deploy that resolves a "
        "new image replaces the whole fleet, new nodes before the old ones go). A request fleet cannot be modified: "
        "every change replaces it, a new image included (replace-all, the only value it takes).",
    )
    fallback: Fallback | None = Field(
        None,
        description="Move missing spot nodes to on-demand and back: a scheduled function raises the on-demand part "
        "when spot stays short and lowers it again when spot returns (maintain fleets with spot in the mix).",
    )

    @property
    def image_rollout(self) -> str:
        """manual or replace-all: what a deploy that resolves a new image does to this fleet."""
        if self.type == "request":
            return ROLLOUT_REPLACE_ALL
        return self.rollout or ROLLOUT_MANUAL


class Ami(_Section):
    """The node image: exactly one of ssm_parameter and id."""

    ssm_parameter: StrictStr | None = Field(
        None, description="SSM parameter holding the AMI id, resolved by CloudFormation at deploy time."
    )
    id: StrictStr | None = Field(None, description="A fixed AMI id (ami-...).")
    root_device_name: StrictStr = Field(
        "/dev/sda1", description="Root device of the AMI: /dev/sda1 (Ubuntu) or /dev/xvda (Amazon Linux)."
    )


class Node(_Section):
    raid0_nvme: StrictBool = Field(True, description="Stripe all NVMe instance-store drives (RAID0, XFS).")
    scratch_mount: StrictStr = Field("/scratch", description="Where the RAID0 volume is mounted.")
    max_clocks: StrictBool = Field(True, description="Persistence mode and clocks locked at the highest supported.")
    mig_profile: StrictStr | None = Field(None, description="MIG profile applied to every GPU, e.g. 3g.20gb.")
    mig_purpose: StrictStr | None = Field(
        None,
        description="What the MIG instances are for: single-node-inference | independent-jobs. Required with "
        "mig_profile when efa is on: NCCL is not supported with MIG, so MIG nodes run no NCCL jobs, over EFA or not.",
    )
    checkpoint_hook: StrictStr | None = Field(
        None,
        description="Command run on a spot rebalance recommendation and again on the interruption notice "
        "(at most once per kind; not for a recommendation that comes with or after the interruption).",
    )


class Environment(_Section):
    name: StrictStr = Field(description="Environment name; must equal the file name without .yaml.")
    account: StrictStr = Field(description='AWS account id, 12 digits, quoted ("123456789012").')
    region: StrictStr = Field(description="AWS region, e.g. us-east-1.")
    availability_zone: StrictStr = Field(description="The single AZ of the cluster (placement groups live in one AZ).")
    network: Network = Field(
        description="Where the nodes live: a new VPC (cidr) or an existing one (vpc_id, subnet_id)."
    )
    instance_type: StrictStr = Field(description="An instance type of the catalog (gpufleet/instance_types.yaml).")
    efa: StrictBool = Field(True, description="One EFA interface per network card.")
    capacity: Capacity = Field(description="How many nodes, and how many of them on-demand.")
    fleet: Fleet = Field(Fleet(), description="How the Spot Fleet keeps the nodes running.")
    ami: Ami = Field(description="The node image: exactly one of ssm_parameter and id.")
    root_volume_gib: StrictInt = Field(200, description="Size of the encrypted gp3 root volume.")
    key_pair: StrictStr | None = Field(None, description="EC2 key pair name; nodes are reached with SSM without one.")
    tags: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="Tags on every resource and node.")
    node: Node = Field(Node(), description="What the node does at boot (user data).")

    @property
    def stack_prefix(self) -> str:
        return f"gpufleet-{self.name}"

    @property
    def resource_tags(self) -> dict[str, str]:
        """The tags every resource of the environment carries: the file's tags and the environment tag."""
        return {**self.tags, ENVIRONMENT_TAG_KEY: self.name}


def environments_dir() -> Path:
    """GPUFLEET_ENVIRONMENTS_DIR, else environments/ in the current directory. Environments are the user's
    configuration, not data shipped with gpufleet: an installed gpufleet has none of its own."""
    return Path(os.environ.get(ENVIRONMENTS_DIR_VARIABLE, Path.cwd() / "environments"))


def environment_files(directory: Path | None = None) -> list[Path]:
    directory = directory or environments_dir()
    return sorted(directory.glob("*.yaml"))


def parse_environment(path: Path) -> Environment:
    """Read and parse one environment file; raise GpufleetError listing every problem found."""
    return read_model(path, Environment, reference="environments/README.md")


def check_environment(path: Path, ami_pipeline: Pipeline | None = None) -> tuple[Environment, list[str]]:
    """Parse and validate one environment file (against the AMI pipeline that publishes its image, when given).
    Errors raise GpufleetError with every problem, one per line; warnings alone do not (gpufleet.validators says
    which rules warn) and come back as lines for the caller to print."""
    environment = parse_environment(path)
    found = validate_environment(environment, path, ami_pipeline=ami_pipeline)
    lines = [problem.line(path) for problem in found]
    if any(problem.severity == "error" for problem in found):
        raise GpufleetError(*lines)
    return environment, lines


def load_environment(path: Path, ami_pipeline: Pipeline | None = None) -> Environment:
    return check_environment(path, ami_pipeline)[0]


def check_environments(paths: list[Path], ami_pipeline: Pipeline | None = None) -> tuple[list[Environment], list[str]]:
    """Check every file, collecting the problems of all of them before failing; return the environments and the
    warning lines."""
    environments: list[Environment] = []
    lines: list[str] = []
    failed = False
    for path in paths:
        try:
            environment, warnings = check_environment(path, ami_pipeline)
        except GpufleetError as error:
            failed = True
            lines.extend(error.problems)
        else:
            environments.append(environment)
            lines.extend(warnings)
    if failed:
        raise GpufleetError(*lines)
    return environments, lines


def load_environments(paths: list[Path], ami_pipeline: Pipeline | None = None) -> list[Environment]:
    return check_environments(paths, ami_pipeline)[0]


def load_named_environment(name: str, ami_pipeline: Pipeline | None = None) -> Environment:
    path = environments_dir() / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in environment_files()) or f"none; {WHERE_ENVIRONMENTS_ARE}"
        raise GpufleetError(f"{path}: unknown environment '{name}' (known: {known})")
    return load_environment(path, ami_pipeline)
