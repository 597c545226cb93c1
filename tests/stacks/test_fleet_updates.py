"""What a deploy of an edited environment does to its deployed Spot Fleet, asserted on two syntheses: before and
after the edit. A change to a create-only property of AWS::EC2::SpotFleet replaces the fleet, any other change
is made in place with ModifySpotFleetRequest, which a request fleet refuses. Which properties are create-only is
read from the resource schema cfn-lint bundles, not listed here."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

from gpufleet.loading import parse_environment
from stacks.environment_stacks import add_environment_stacks
from tests.conftest import SYNTHESIS_TIME

REPOSITORY = Path(__file__).resolve().parents[2]
# h100 deploys into an existing VPC: one stack to synthesize, the cluster.
H100 = parse_environment(REPOSITORY / "environments" / "h100.yaml")
CREATE_ONLY = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::EC2::SpotFleet").schema[
    "createOnlyProperties"
]
PINNED_IMAGE = "ami-0123456789abcdef0"


def edited(env, **sections):
    """env with some fields of its sections replaced: edited(env, fleet={"type": "maintain"})."""
    return env.model_copy(
        update={name: getattr(env, name).model_copy(update=fields) for name, fields in sections.items()}
    )


def maintained(env):
    return edited(env, fleet={"type": "maintain"}, capacity={"on_demand": 1})


def synthesized_fleet(env) -> tuple[str, dict]:
    """The logical id and properties of the environment's Spot Fleet."""
    app = cdk.App()
    add_environment_stacks(app, env, SYNTHESIS_TIME)
    template = app.synth().get_stack_by_name(f"{env.stack_prefix}-cluster").template
    ((logical_id, fleet),) = [(k, r) for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SpotFleet"]
    return logical_id, fleet["Properties"]


def at(properties: dict, pointer: str):
    value = {"properties": properties}
    for key in pointer.strip("/").split("/"):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def replacing_changes(before, after) -> list[str]:
    """The create-only properties that differ between two syntheses of a fleet: any one replaces it."""
    (before_id, before_fleet), (after_id, after_fleet) = synthesized_fleet(before), synthesized_fleet(after)
    assert before_id == after_id, "a new logical id would also replace the fleet"
    return [pointer for pointer in CREATE_ONLY if at(before_fleet, pointer) != at(after_fleet, pointer)]


def fleet_tags(env) -> dict:
    (spec,) = synthesized_fleet(env)[1]["SpotFleetRequestConfigData"]["TagSpecifications"]
    assert spec["ResourceType"] == "spot-fleet-request"
    return {tag["Key"]: tag["Value"] for tag in spec["Tags"]}


def test_schema_says_capacity_and_launch_template_update_in_place_and_tags_replace():
    config = "/properties/SpotFleetRequestConfigData/"
    assert f"{config}TagSpecifications" in CREATE_ONLY
    for updatable in ("TargetCapacity", "OnDemandTargetCapacity", "LaunchTemplateConfigs"):
        assert f"{config}{updatable}" not in CREATE_ONLY


def test_a_capacity_change_replaces_a_request_fleet():
    after = edited(H100, capacity={"target": 3, "on_demand": 3})
    assert replacing_changes(H100, after) == ["/properties/SpotFleetRequestConfigData/TagSpecifications"]


def test_a_request_fleet_is_replaced_by_every_new_launch_template_version():
    tags = fleet_tags(H100)
    assert tags["gpufleet:launch-template-version"] == {
        "Fn::GetAtt": ["NodeLaunchTemplateCABE86F2", "LatestVersionNumber"]
    }
    assert set(tags) == {"gpufleet:environment", "gpufleet:launch-template-version", "gpufleet:request-digest"}


def test_a_capacity_change_updates_a_maintain_fleet_in_place():
    before = maintained(H100)
    assert replacing_changes(before, edited(before, capacity={"target": 3})) == []


@pytest.mark.parametrize("fleet_type", ["maintain", "request"])
def test_a_tag_change_touches_no_create_only_property_of_the_fleet(fleet_type):
    before = edited(H100, fleet={"type": fleet_type}, capacity={"on_demand": 1})
    after = before.model_copy(update={"tags": {"team": "foundation-models", "cost-center": "research-2"}})
    assert replacing_changes(before, after) == []
    assert "cost-center" not in fleet_tags(after)


def test_manual_rollout_keeps_the_fleet_through_an_image_change():
    before = edited(maintained(H100), ami={"ssm_parameter": None, "id": PINNED_IMAGE})
    after = edited(before, ami={"id": "ami-0fedcba9876543210"})
    assert before.fleet.image_rollout == "manual"
    assert replacing_changes(before, after) == []
    assert fleet_tags(before) == {"gpufleet:environment": "h100"}


def test_replace_all_rollout_replaces_the_fleet_with_the_image():
    before = edited(maintained(H100), fleet={"rollout": "replace-all"}, ami={"ssm_parameter": None, "id": PINNED_IMAGE})
    after = edited(before, ami={"id": "ami-0fedcba9876543210"})
    assert replacing_changes(before, after) == ["/properties/SpotFleetRequestConfigData/TagSpecifications"]


def test_replace_all_rollout_tags_the_fleet_with_the_image_resolved_at_deploy_time():
    env = edited(maintained(H100), fleet={"rollout": "replace-all"})
    assert fleet_tags(env) == {
        "gpufleet:environment": "h100",
        "gpufleet:image": {"Ref": "NodeLaunchTemplateNodeImageParameter4F083533"},
    }


def create_only_changes(before, after) -> list[str]:
    """Every resource of every stack of the environment whose create-only properties (cfn-lint's schemas) differ
    between two syntheses: each would be replaced by the deploy."""

    def resources(env) -> dict[str, dict]:
        app = cdk.App()
        stacks = add_environment_stacks(app, env, SYNTHESIS_TIME)
        assembly = app.synth()
        return {
            f"{stack.stack_name}/{logical_id}": resource
            for stack in stacks
            for logical_id, resource in assembly.get_stack_by_name(stack.stack_name).template["Resources"].items()
        }

    old, new = resources(before), resources(after)
    assert sorted(old) == sorted(new), "a changed logical id would also replace its resource"
    changed = []
    for name, resource in old.items():
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource["Type"]).schema
        for pointer in schema.get("createOnlyProperties", []):
            if at(resource.get("Properties", {}), pointer) != at(new[name].get("Properties", {}), pointer):
                changed.append(f"{name} {pointer}")
    return changed


def test_a_tag_change_replaces_no_resource_of_the_environment():
    """Tags are create-only on AWS::EC2::PlacementGroup: the environment's tags stay off it, or a tag edit would
    replace the placement group and with it every node."""
    dev = parse_environment(REPOSITORY / "environments" / "dev.yaml")
    assert create_only_changes(dev, dev.model_copy(update={"tags": {"team": "training", "cost-center": "r2"}})) == []
