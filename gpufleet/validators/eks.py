"""The eks flavour (flavour: eks): its section, the control-plane subnets and egress EKS needs and the fleet flavour
does not, and the options that mean nothing on EKS nodes. Sources and design: docs/design-eks.md."""

from __future__ import annotations

import re

from gpufleet.constants import EKS_ADD_ON_REGISTRY_ACCOUNTS, FLAVOUR_EKS, FLAVOUR_FLEET
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, ValidationContext

# EKS places the control plane's network interfaces in "at least two subnets that are in different Availability
# Zones" (EKS user guide, network-reqs).
CONTROL_PLANE_AVAILABILITY_ZONES = 2


class EksSectionValidator(EnvironmentValidator):
    field = "eks"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.flavour == FLAVOUR_EKS and env.eks is None:
            return self.problem(
                "required key is missing (the eks flavour needs at least kubernetes_version and admin_principal_arns)"
            )
        if env.flavour == FLAVOUR_FLEET and env.eks is not None:
            return self.problem("set, but flavour is fleet (set flavour: eks, or remove eks)")
        return []


class ControlPlaneSubnetsValidator(EnvironmentValidator):
    """A new VPC gets one control-plane subnet in each named AZ; an existing VPC names its subnets (whose AZs only
    AWS knows: gpufleet preflight's business, not an offline rule)."""

    field = "eks"
    flavours = (FLAVOUR_EKS,)

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        eks = env.eks
        if eks is None:
            return []
        zones_field, ids_field = "eks.control_plane_availability_zones", "eks.control_plane_subnet_ids"
        if env.network.creates_vpc:
            if eks.control_plane_subnet_ids is not None:
                return [
                    Problem(
                        ids_field,
                        "only an existing VPC takes subnet ids (network.cidr creates the VPC and its subnets: name "
                        "control_plane_availability_zones instead)",
                    )
                ]
            return self._zones_problems(env, zones_field, eks.control_plane_availability_zones)
        if eks.control_plane_availability_zones is not None:
            return [
                Problem(
                    zones_field,
                    "only a new VPC (network.cidr) gets control-plane subnets from gpufleet (in an existing VPC name "
                    "control_plane_subnet_ids instead)",
                )
            ]
        ids = eks.control_plane_subnet_ids or ()
        if len(set(ids)) < CONTROL_PLANE_AVAILABILITY_ZONES:
            return [
                Problem(
                    ids_field,
                    f"{len(set(ids))} distinct subnets, but EKS needs subnets in at least "
                    f"{CONTROL_PLANE_AVAILABILITY_ZONES} availability zones (name two or more subnets of "
                    f"{env.network.vpc_id} in different availability zones)",
                )
            ]
        return []

    @staticmethod
    def _zones_problems(env: Environment, field: str, zones: tuple[str, ...] | None) -> list[Problem]:
        example = f"[{env.region}a, {env.region}b]"
        if zones is None:
            return [
                Problem(
                    field,
                    "required key is missing with network.cidr (EKS needs control-plane subnets in "
                    f"{CONTROL_PLANE_AVAILABILITY_ZONES} availability zones: name them, e.g. {example})",
                )
            ]
        problems = [
            Problem(
                field,
                f"'{zone}' is not an availability zone of {env.region} (the region name followed by one letter, "
                f"e.g. {env.region}a)",
            )
            for zone in zones
            if not re.fullmatch(re.escape(env.region) + r"[a-z]", zone)
        ]
        distinct = len(set(zones))
        if distinct < CONTROL_PLANE_AVAILABILITY_ZONES:
            problems.append(
                Problem(
                    field,
                    f"{distinct} distinct availability zones, but EKS needs control-plane subnets in at least "
                    f"{CONTROL_PLANE_AVAILABILITY_ZONES} (e.g. {example})",
                )
            )
        return problems


class AddOnRegistryRegionValidator(EnvironmentValidator):
    """The region must be one whose EKS add-on registry gpufleet knows (gpufleet.constants
    EKS_ADD_ON_REGISTRY_ACCOUNTS, from the EKS user guide's add-ons-images table): the EFA device plugin's image comes
    from there, and a guessed account gives nodes that never advertise vpc.amazonaws.com/efa."""

    field = "region"
    flavours = (FLAVOUR_EKS,)

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.region in EKS_ADD_ON_REGISTRY_ACCOUNTS:
            return []
        return self.problem(
            f"{env.region!r} has no EKS add-on image registry in gpufleet's table (gpufleet/constants.py "
            "EKS_ADD_ON_REGISTRY_ACCOUNTS, from the EKS user guide's add-ons-images page): choose a region listed "
            "there, or add the region's row from that page"
        )


class ImageEgressValidator(EnvironmentValidator):
    """The add-ons come from outside the VPC: the NVIDIA device plugin's image from nvcr.io, the MPI operator's from
    Docker Hub (their charts and manifests, docs/design-eks.md "Device plugins", "Kubeflow MPI operator"), and the
    charts from their repositories, which the kubectl handler reaches from the VPC's private subnets (aws_eks_v2
    README, "Kubectl Support"). The VPC endpoints reach AWS services only."""

    field = "network.nat_gateway"
    flavours = (FLAVOUR_EKS,)

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        if env.network.creates_vpc and not env.network.nat_gateway:
            return self.problem(
                "the eks flavour pulls images from registries outside AWS (nvcr.io, Docker Hub) and charts from their "
                "repositories; the VPC endpoints reach AWS services only (set nat_gateway: true)"
            )
        return []


class FleetOnlyOptionsValidator(EnvironmentValidator):
    """Options of the fleet flavour that an eks environment cannot use, each refused where the file writes it (a
    default is no choice): the eks nodes boot EKS's image with EKS's bootstrap, not a gpufleet image with gpufleet's
    node scripts, and EKS managed node groups keep them running."""

    field = "flavour"
    flavours = (FLAVOUR_EKS,)

    REASONS = {
        "ami": "the GPU nodes boot EKS's AL2023 NVIDIA image (a custom image in a managed node group's launch template "
        "gets no EKS bootstrap: EKS user guide, launch-templates)",
        "fleet": "EKS managed node groups keep the nodes running (no Spot Fleet or gpufleet Auto Scaling group)",
        "monitoring": "its CloudWatch agent configuration travels in gpufleet's node scripts, which the eks nodes do "
        "not run",
    }
    NODE_REASON = "gpufleet's node scripts do it, and the eks nodes do not run them"

    def check(self, env: Environment, context: ValidationContext) -> list[Problem]:
        written = [key for key in self.REASONS if key in env.model_fields_set]
        problems = [Problem(key, f"not an eks option: {self.REASONS[key]} (remove it)") for key in written]
        node_options = sorted(env.node.model_fields_set - {"raid0_nvme"})
        problems += [
            Problem(f"node.{option}", f"not an eks option: {self.NODE_REASON} (remove it)") for option in node_options
        ]
        return problems
