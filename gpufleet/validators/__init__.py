"""One small validator per rule an environment must satisfy that needs more than one field or outside knowledge
(the instance catalog, the AMI pipeline, the node scripts, the clock), one module per domain: naming, network, node,
capacity, fleet, fallback, image, storage, eks; the rules between environment files (cross_environment, run by
gpufleet.loading on the files checked together); and the rules of the AMI pipeline's file (pipeline). A validator
applies to the flavours it names (EnvironmentValidator.flavours): the fleet flavour's own rules are skipped on eks.

Each validator returns Problems naming the field and saying what is wrong and what is allowed; the caller
prefixes the file name. validate_environment runs them all so a user sees every problem at once, once the file
parses (gpufleet.environment checks types and every rule about one field alone while parsing, with the same kind of
message).

A problem is an error or a warning. Errors stop synthesis. Warnings are rules about launching capacity that a file
can come to break with no edit, by the clock alone: synthesis goes on, because `cdk destroy` synthesizes first and
the teardown of an existing cluster must stay possible. `gpufleet validate` prints warnings and `gpufleet preflight`
fails on them. Two such rules: fleet.valid_until in the past, and a Capacity Block whose nodes' time is over
(capacity.capacity_block.end). A third kind warns of what the guides have a user run that the environment cannot
(network.nat_gateway: no way to the internet for a --setup's pip install): gpufleet's own steps work, so synthesis
goes on. Every other rule judges the file against itself,
the instance catalog, ami/pipeline.yaml or the node scripts, which change only when someone edits them (the
capacity and subnet-size rules included: a file that passed at deploy passes at teardown).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gpufleet.ami.pipeline import Pipeline
from gpufleet.environment import Environment
from gpufleet.rules import Problem
from gpufleet.validators.base import EnvironmentValidator, ValidationContext
from gpufleet.validators.capacity import (
    CapacityBlockEndedValidator,
    CapacityBlockRolloutValidator,
    CapacityBlockValidator,
    CapacityBlockWindowValidator,
    OnDemandCapacityValidator,
    ReservationGroupRegionValidator,
    ReservationIdsBackendValidator,
    ReservationPreferenceValidator,
    ReservationTargetValidator,
    ReservedInstanceTypeValidator,
)
from gpufleet.validators.eks import (
    AddOnRegistryRegionValidator,
    ControlPlaneSubnetsValidator,
    EksSectionValidator,
    FleetOnlyOptionsValidator,
    ImageEgressValidator,
)
from gpufleet.validators.fallback import (
    FallbackCapacityBlockValidator,
    FallbackCeilingValidator,
    FallbackNeedsMaintainValidator,
    FallbackNeedsSpotValidator,
)
from gpufleet.validators.fleet import (
    AutoScalingAllocationStrategyValidator,
    AutoScalingFleetTypeValidator,
    AutoScalingReplacementStrategyValidator,
    AutoScalingReplaceUnhealthyValidator,
    AutoScalingValidUntilValidator,
    CapacityRebalanceValidator,
    RolloutValidator,
    ValidUntilValidator,
)
from gpufleet.validators.image import AmiSourceValidator, DeepLearningAmiValidator, PublishedImageValidator
from gpufleet.validators.naming import EnvironmentNameValidator, ReservedNameValidator
from gpufleet.validators.network import (
    AvailabilityZoneValidator,
    InternetEgressValidator,
    NetworkChoiceValidator,
    NodeSubnetCapacityValidator,
)
from gpufleet.validators.node import (
    CheckpointHookValidator,
    EfaSupportValidator,
    InstanceTypeValidator,
    MigProfileValidator,
    MigPurposeValidator,
    UserDataSizeValidator,
)
from gpufleet.validators.storage import (
    DataRepositoryValidator,
    ExistingDnsNameValidator,
    LustreKmsKeyValidator,
    LustreThroughputValidator,
    MetadataTagKeysValidator,
    SharedMountPathValidator,
    StorageChoiceValidator,
)

# In the order `gpufleet validate` reports their problems.
VALIDATORS: tuple[EnvironmentValidator, ...] = (
    EnvironmentNameValidator(),
    ReservedNameValidator(),
    EksSectionValidator(),
    FleetOnlyOptionsValidator(),
    AvailabilityZoneValidator(),
    NetworkChoiceValidator(),
    InternetEgressValidator(),
    NodeSubnetCapacityValidator(),
    ControlPlaneSubnetsValidator(),
    ImageEgressValidator(),
    AddOnRegistryRegionValidator(),
    InstanceTypeValidator(),
    EfaSupportValidator(),
    OnDemandCapacityValidator(),
    RolloutValidator(),
    CapacityRebalanceValidator(),
    ReservationTargetValidator(),
    ReservationIdsBackendValidator(),
    ReservationGroupRegionValidator(),
    ReservationPreferenceValidator(),
    CapacityBlockValidator(),
    CapacityBlockWindowValidator(),
    CapacityBlockEndedValidator(),
    CapacityBlockRolloutValidator(),
    ReservedInstanceTypeValidator(),
    ValidUntilValidator(),
    AutoScalingFleetTypeValidator(),
    AutoScalingValidUntilValidator(),
    AutoScalingReplaceUnhealthyValidator(),
    AutoScalingReplacementStrategyValidator(),
    AutoScalingAllocationStrategyValidator(),
    AmiSourceValidator(),
    DeepLearningAmiValidator(),
    PublishedImageValidator(),
    MigProfileValidator(),
    MigPurposeValidator(),
    UserDataSizeValidator(),
    CheckpointHookValidator(),
    FallbackNeedsSpotValidator(),
    FallbackNeedsMaintainValidator(),
    FallbackCeilingValidator(),
    FallbackCapacityBlockValidator(),
    StorageChoiceValidator(),
    LustreThroughputValidator(),
    LustreKmsKeyValidator(),
    DataRepositoryValidator(),
    ExistingDnsNameValidator(),
    SharedMountPathValidator(),
    MetadataTagKeysValidator(),
)


def validate_environment(
    env: Environment, path: Path, now: dt.datetime | None = None, ami_pipeline: Pipeline | None = None
) -> list[Problem]:
    context = ValidationContext(path=path, now=now or dt.datetime.now(dt.UTC), ami_pipeline=ami_pipeline)
    return [
        problem
        for validator in VALIDATORS
        if env.flavour in validator.flavours
        for problem in validator.check(env, context)
    ]
