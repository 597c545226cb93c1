"""Where the nodes live: the availability zone, the network choice and the node subnet's addresses."""

from __future__ import annotations

import re

from gpufleet.catalog import load_catalog
from gpufleet.environment import LARGEST_VPC_PREFIX, Environment
from gpufleet.node_calls import interface_endpoint_services
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, FleetFlavourValidator, ValidationContext


class AvailabilityZoneValidator(EnvironmentValidator):
    field = "availability_zone"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if not re.fullmatch(re.escape(env.region) + r"[a-z]", env.availability_zone):
            return self.problem(
                f"'{env.availability_zone}' is not an availability zone of {env.region} "
                f"(the region name followed by one letter, e.g. {env.region}a)"
            )
        return []


class NetworkChoiceValidator(EnvironmentValidator):
    field = "network"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        network = env.network
        existing = (network.vpc_id, network.subnet_id)
        if network.cidr is None and None in existing:
            return self.problem("no network chosen (set cidr for a new VPC, or both vpc_id and subnet_id)")
        if network.cidr is not None and any(existing):
            return self.problem(
                "cidr and vpc_id/subnet_id both set (cidr creates a VPC; vpc_id and subnet_id "
                "import one: keep one of the two)"
            )
        if network.nat_gateway and network.cidr is None:
            return [Problem("network.nat_gateway", "only a new VPC gets a NAT gateway (remove it, or use cidr)")]
        return []


class InternetEgressValidator(FleetFlavourValidator):
    """A warning: a new VPC without a NAT gateway reaches AWS through its endpoints only (stacks/network_stack.py,
    checked by gpufleet.reachability), which is all the node scripts need; what the guides have a user run on the nodes
    may need more, e.g. `gpufleet run --setup 'pip install ...'` (docs/guides/running-jobs.md,
    docs/guides/elastic-training.md). Synthesis goes on: the environment is sound for what gpufleet itself does.
    An existing VPC's routes are `gpufleet preflight`'s to check. The eks flavour requires the gateway (eks.py)."""

    field = "network.nat_gateway"
    severity = "warning"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.network.cidr is None or env.network.nat_gateway:
            return []
        return self.problem(
            "no NAT gateway: the nodes reach AWS through the VPC's endpoints only, so a run's --setup that installs "
            "from PyPI (as the guides do) or downloads anything else from the internet fails; set nat_gateway: true, "
            "or bring packages in through S3 (docs/guides/environments.md, What needs a NAT gateway)"
        )


class NodeSubnetCapacityValidator(EnvironmentValidator):
    """Every interface with an ENA device takes a private address (`efa-only` interfaces take none: see
    InstanceType.interface_types); the node subnet also loses the 5 addresses AWS reserves and one per interface
    endpoint."""

    field = "network.cidr"
    reserved_per_subnet = 5

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        instance = load_catalog().get(env.instance_type)
        if instance is None or env.network.cidr is None:
            return []
        per_node = instance.addresses_per_node(env.efa)
        # Capacity rebalance launches replacements for spot nodes before the old ones go.
        peak_nodes = env.capacity.target + (env.capacity.spot if env.fleet.capacity_rebalance else 0)
        # The network stack's interface endpoints, each with an interface in the node subnet.
        endpoints = len(interface_endpoint_services(env))
        needed = peak_nodes * per_node + endpoints
        available = self.addresses(env.network.node_subnet_prefix)
        if needed <= available:
            return []
        vpc_prefix = env.network.node_subnet_prefix - 1
        fitting = [p for p in range(vpc_prefix, LARGEST_VPC_PREFIX - 1, -1) if self.addresses(p + 1) >= needed]
        fix = (
            f"use /{fitting[0]} or larger"
            if fitting
            else f"more than a /{LARGEST_VPC_PREFIX}, the largest VPC allowed, holds: lower capacity.target, or use "
            "an existing VPC (vpc_id, subnet_id)"
        )
        return self.problem(
            f"/{vpc_prefix} leaves {available} addresses in the node subnet, but {peak_nodes} nodes "
            f"({env.instance_type}, {per_node} per node) and {endpoints} VPC endpoints need {needed} "
            f"({fix})"
        )

    def addresses(self, subnet_prefix: int) -> int:
        return 2 ** (32 - subnet_prefix) - self.reserved_per_subnet
