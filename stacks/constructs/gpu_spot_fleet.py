"""The Spot Fleet that keeps the nodes running: on-demand floor, spot for the rest, terminate on interruption.

What a deploy does to a deployed fleet follows from AWS::EC2::SpotFleet's resource schema (cfn-lint's bundled copy:
cfnlint/data/schemas, AWS::EC2::SpotFleet; createOnlyProperties and handlers.update): TargetCapacity,
OnDemandTargetCapacity, LaunchTemplateConfigs, ExcessCapacityTerminationPolicy, Context and TargetCapacityUnitType
are updated in place with ModifySpotFleetRequest; a change to any other property (TagSpecifications among them)
replaces the fleet, and CloudFormation creates the new fleet before it deletes the old one. ModifySpotFleetRequest
works only on maintain fleets (EC2 API reference: "You can only modify a Spot Fleet request of type maintain.",
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html).

So the fleet request's tags (TagSpecifications, the only place they live: the schema says the resource is not
taggable, and cdk.Tags does not reach them) are the fixed environment tag plus tags that change exactly when the
fleet must be replaced:
- a request fleet: the launch template version and a digest of the rest of its configuration, so any change
  replaces it instead of failing in ModifySpotFleetRequest;
- a maintain fleet with fleet.rollout replace-all: the node image, resolved by CloudFormation at deploy time, so
  a deploy that resolves a new image replaces the fleet while every other change stays in place.
The environment's own tags go to the nodes, volumes and interfaces through the launch template, which takes them
as a new version in place.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpufleet.constants import ENVIRONMENT_TAG_KEY, FLEET_TYPE_MAINTAIN, ROLLOUT_REPLACE_ALL
from gpufleet.environment import Fleet

IMAGE_TAG_KEY = "gpufleet:image"
LAUNCH_TEMPLATE_VERSION_TAG_KEY = "gpufleet:launch-template-version"
REQUEST_DIGEST_TAG_KEY = "gpufleet:request-digest"


class GpuSpotFleet(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        instance_type: str,
        target: int,
        on_demand: int,
        fleet: Fleet,
        launch_template: ec2.CfnLaunchTemplate,
        image_id: str,
    ) -> None:
        """target, on_demand: the nodes the fleet keeps and how many of them are on-demand; image_id: the image the
        launch template resolves (a token when it comes from SSM at deploy time)."""
        super().__init__(scope, construct_id)
        self.fleet_role = iam.Role(
            self,
            "FleetRole",
            assumed_by=iam.ServicePrincipal("spotfleet.amazonaws.com"),
            description=f"gpufleet {environment_name}: lets Spot Fleet launch, tag and terminate the nodes",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AmazonEC2SpotFleetTaggingRole")
            ],
        )
        cdk.Validations.of(self.fleet_role).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonEC2SpotFleetTaggingRole]",
                reason="The policy AWS documents for Spot Fleet roles; AWS updates it when the service needs new "
                "actions, which a copied inline policy would silently miss",
            )
        )
        maintains = fleet.type == FLEET_TYPE_MAINTAIN
        config: dict[str, Any] = dict(
            iam_fleet_role=self.fleet_role.role_arn,
            type=fleet.type,
            target_capacity=target,
            on_demand_target_capacity=on_demand,
            on_demand_allocation_strategy=fleet.on_demand_allocation_strategy,
            allocation_strategy=fleet.allocation_strategy,
            # Placement groups refuse spot instances that stop or hibernate on interruption.
            instance_interruption_behavior="terminate",
            replace_unhealthy_instances=fleet.replace_unhealthy_instances if maintains else None,
            excess_capacity_termination_policy="default" if maintains else None,
            terminate_instances_with_expiration=True,
            valid_until=_utc_iso(fleet.valid_until),
            spot_maintenance_strategies=self._maintenance_strategies(fleet),
            launch_template_configs=[
                ec2.CfnSpotFleet.LaunchTemplateConfigProperty(
                    launch_template_specification=ec2.CfnSpotFleet.FleetLaunchTemplateSpecificationProperty(
                        launch_template_id=launch_template.ref,
                        version=launch_template.attr_latest_version_number,
                    ),
                    overrides=[ec2.CfnSpotFleet.LaunchTemplateOverridesProperty(instance_type=instance_type)],
                )
            ],
        )
        tags = {ENVIRONMENT_TAG_KEY: environment_name}
        if not maintains:
            tags[LAUNCH_TEMPLATE_VERSION_TAG_KEY] = launch_template.attr_latest_version_number
            tags[REQUEST_DIGEST_TAG_KEY] = self._digest(config)
        elif fleet.image_rollout == ROLLOUT_REPLACE_ALL:
            tags[IMAGE_TAG_KEY] = image_id
        self.spot_fleet = ec2.CfnSpotFleet(
            self,
            "Resource",
            spot_fleet_request_config_data=ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(
                **config,
                tag_specifications=[
                    ec2.CfnSpotFleet.SpotFleetTagSpecificationProperty(
                        resource_type="spot-fleet-request",
                        tags=[cdk.CfnTag(key=key, value=value) for key, value in sorted(tags.items())],
                    )
                ],
            ),
        )

    def _digest(self, config: dict[str, Any]) -> str:
        """A digest of the configuration as synthesized (references to other resources as their logical ids)."""
        resolved = cdk.Stack.of(self).resolve(ec2.CfnSpotFleet.SpotFleetRequestConfigDataProperty(**config))
        return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]

    @staticmethod
    def _maintenance_strategies(fleet: Fleet) -> ec2.CfnSpotFleet.SpotMaintenanceStrategiesProperty | None:
        rebalance = fleet.capacity_rebalance
        if rebalance is None:
            return None
        return ec2.CfnSpotFleet.SpotMaintenanceStrategiesProperty(
            capacity_rebalance=ec2.CfnSpotFleet.SpotCapacityRebalanceProperty(
                replacement_strategy=rebalance.replacement_strategy,
                termination_delay=rebalance.termination_delay_seconds,
            )
        )


def _utc_iso(moment: dt.datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
