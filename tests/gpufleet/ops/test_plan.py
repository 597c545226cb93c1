"""gpufleet plan: resource changes between synthesized templates and deployed or saved ones, and their node impact.

Pairs of templates come from one synthesis of the shipped environments (the `assembly` fixture), edited where a
test needs one specific change; the end-to-end tests synthesize a changed environment file once more.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from gpufleet.ops.plan import StackPair, plan_changes, values_at
from tests.conftest import REPOSITORY, synthesize

NETWORK, CLUSTER = "gpufleet-dev-network", "gpufleet-dev-cluster"
FLEET, LAUNCH_TEMPLATE = "Fleet30813DF3", "NodeLaunchTemplateCABE86F2"
SUBNET = "VpcnodesSubnet1Subnet50682361"


@pytest.fixture
def dev(assembly, tmp_path):
    """The dev templates as deployed (files under old/) and a copy to edit into the next deploy (new)."""
    old = tmp_path / "old"
    old.mkdir()
    for name in (NETWORK, CLUSTER):
        shutil.copy(assembly.template_file(name), old / f"{name}.template.json")
    return {name: assembly.template_json(name) for name in (NETWORK, CLUSTER)}, old


def resource(template: dict, logical_id: str) -> dict:
    return template["Resources"][logical_id]["Properties"]


def fleet_config(template: dict) -> dict:
    return resource(template, FLEET)["SpotFleetRequestConfigData"]


def plan_lines(old_dir: Path, new: dict[str, dict]) -> list[str]:
    pairs = [
        StackPair(name, json.loads((old_dir / f"{name}.template.json").read_text()), new[name])
        for name in (NETWORK, CLUSTER)
    ]
    return [change.line() for change in plan_changes(pairs, "us-east-1")]


def write_assembly(directory: Path, templates: dict[str, dict]) -> Path:
    """A minimal cloud assembly of the given templates, as --cdk-out reads it."""
    directory.mkdir()
    artifacts = {}
    for name, template in templates.items():
        (directory / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{name}.template.json"}}
    (directory / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return directory


def test_a_create_only_fleet_property_replaces_the_fleet_and_exits_3(dev, run_cli, tmp_path):
    new, old = dev
    fleet_config(new[CLUSTER])["AllocationStrategy"] = "capacityOptimized"
    code, out, err = run_cli(
        "plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)), "--against", str(old)
    )
    assert code == 3
    assert out.splitlines() == [
        "Plan dev (us-east-1):",
        f"  {NETWORK}: against {old}/{NETWORK}.template.json",
        f"  {CLUSTER}: against {old}/{CLUSTER}.template.json",
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] replacement (SpotFleetRequestConfigData.AllocationStrategy): "
        "replaces running nodes",
        f"{CLUSTER} FleetTeardown6AA62985 [Custom::GpufleetFleetTeardown] in place (FleetRequestId): "
        "no effect on nodes",
        f"{CLUSTER} FleetTeardownHandlerRoleDefaultPolicyDB68C174 [AWS::IAM::Policy] in place "
        "(PolicyDocument.Statement): no effect on nodes",
        "fleet.rollout: manual",
        "3 change(s); 1 replace or terminate running nodes",
    ]
    assert err == "dev: this deploy replaces or terminates running nodes; rerun with --allow-replace to accept\n"
    code, _, err = run_cli("plan", "dev", "--cdk-out", str(tmp_path / "new"), "--against", str(old), "--allow-replace")
    assert (code, err) == (0, "")


def test_more_target_capacity_on_a_maintain_fleet_is_in_place_and_exits_0(dev, run_json, tmp_path):
    new, old = dev
    assert fleet_config(new[CLUSTER])["Type"] == "maintain"
    fleet_config(new[CLUSTER])["TargetCapacity"] = 3
    code, document = run_json(
        "plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)), "--against", str(old)
    )
    assert code == 0
    assert document["replaces_running_nodes"] is False
    assert document["changes"] == [
        {
            "stack": CLUSTER,
            "logical_id": FLEET,
            "type": "AWS::EC2::SpotFleet",
            "action": "in place",
            "properties": ["SpotFleetRequestConfigData.TargetCapacity"],
            "replacing_properties": [],
            "node_impact": "in place: running nodes unaffected; launches nodes (target capacity 2 -> 3)",
            "affects_running_nodes": False,
        }
    ]


def test_less_target_capacity_terminates_the_nodes_above_it(dev):
    new, old = dev
    fleet_config(new[CLUSTER])["TargetCapacity"] = 1
    assert plan_lines(old, new) == [
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.TargetCapacity): "
        "terminates nodes (target capacity 2 -> 1)"
    ]


def test_a_launch_template_change_is_a_new_version_for_new_nodes_only(dev):
    new, old = dev
    resource(new[CLUSTER], LAUNCH_TEMPLATE)["LaunchTemplateData"]["EbsOptimized"] = False
    assert plan_lines(old, new) == [
        # The fleet names the template's LatestVersionNumber, which the update moves on.
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.LaunchTemplateConfigs): "
        "in place: running nodes unaffected",
        f"{CLUSTER} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.EbsOptimized): "
        "in place: new launch template version, new nodes only",
    ]


def test_a_new_subnet_cidr_replaces_the_subnet_the_nodes_run_in(dev):
    new, old = dev
    resource(new[NETWORK], SUBNET)["CidrBlock"] = "10.40.128.0/20"
    lines = plan_lines(old, new)
    assert [line for line in lines if "VPCEndpoint" not in line] == [
        f"{NETWORK} VpcnodesSubnet1RouteTableAssociation94540C27 [AWS::EC2::SubnetRouteTableAssociation] "
        "replacement (SubnetId): no effect on nodes",
        f"{NETWORK} {SUBNET} [AWS::EC2::Subnet] replacement (CidrBlock): terminates nodes",
        # Across the stacks: the export of the subnet id changes, so the launch template's interfaces do.
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.LaunchTemplateConfigs): "
        "in place: running nodes unaffected",
        f"{CLUSTER} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.NetworkInterfaces): "
        "in place: new launch template version, new nodes only",
    ]
    assert f"{NETWORK} VpcSsm0F56837D [AWS::EC2::VPCEndpoint] in place (SubnetIds): no effect on nodes" in lines


def test_a_replaced_fleet_role_replaces_the_fleet_through_its_create_only_reference(dev):
    new, old = dev
    resource(new[CLUSTER], "FleetFleetRoleAC5D1B26")["Path"] = "/gpufleet/"
    lines = plan_lines(old, new)
    assert (
        f"{CLUSTER} FleetFleetRoleAC5D1B26 [AWS::IAM::Role] replacement (Path): in place: running nodes unaffected"
        in lines
    )
    assert (
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] replacement (SpotFleetRequestConfigData.IamFleetRole): "
        "replaces running nodes"
    ) in lines


def test_a_changed_logical_id_is_a_removal_and_an_addition(dev):
    new, old = dev
    renamed = json.dumps(new[CLUSTER]).replace('"PlacementGroup68E91A0F"', '"PlacementGroupRenamed"')
    new[CLUSTER] = json.loads(renamed)
    assert plan_lines(old, new) == [
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.LaunchTemplateConfigs): "
        "in place: running nodes unaffected",
        f"{CLUSTER} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.Placement.GroupName): "
        "in place: new launch template version, new nodes only",
        f"{CLUSTER} PlacementGroup68E91A0F [AWS::EC2::PlacementGroup] removed: terminates nodes",
        f"{CLUSTER} PlacementGroupRenamed [AWS::EC2::PlacementGroup] added: running nodes unaffected",
    ]


def test_wildcard_pointers_take_the_property_of_every_list_item():
    properties = {"Rules": [{"Port": 1, "Note": "a"}, {"Port": 2}], "Name": "x"}
    assert values_at(properties, "/properties/Rules/*/Port") == [1, 2]
    assert values_at(properties, "/properties/Name") == "x"
    changed = copy.deepcopy(properties)
    changed["Rules"][1]["Port"] = 3
    assert values_at(changed, "/properties/Rules/*/Port") != values_at(properties, "/properties/Rules/*/Port")
    changed = copy.deepcopy(properties)
    changed["Rules"][0]["Note"] = "b"
    assert values_at(changed, "/properties/Rules/*/Port") == values_at(properties, "/properties/Rules/*/Port")


def test_the_deployed_template_comes_from_get_template_original(dev, stubbed, run_cli, tmp_path):
    new, old = dev
    fleet_config(new[CLUSTER])["TerminateInstancesWithExpiration"] = False
    cloudformation = stubbed("cloudformation")
    cloudformation.add_response(
        "get_template",
        {"TemplateBody": (old / f"{NETWORK}.template.json").read_text()},
        {"StackName": NETWORK, "TemplateStage": "Original"},
    )
    cloudformation.add_client_error(
        "get_template",
        "ValidationError",
        f"Stack with id {CLUSTER} does not exist",
        expected_params={"StackName": CLUSTER, "TemplateStage": "Original"},
    )
    code, out, _ = run_cli("plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)))
    cloudformation.assert_no_pending_responses()
    lines = out.splitlines()
    assert code == 0
    assert lines[1:3] == [
        f"  {NETWORK}: against deployed stack {NETWORK}",
        f"  {CLUSTER}: against nothing deployed: new stack",
    ]
    assert f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] added: launches nodes" in lines
    assert not any(line.startswith(NETWORK) for line in lines)


def test_bad_against_arguments_are_one_line_each(dev, run_cli, tmp_path):
    new, old = dev
    assembly_dir = str(write_assembly(tmp_path / "new", new))
    code, _, err = run_cli("plan", "dev", "--cdk-out", assembly_dir, "--against", "gpufleet-dev-clustr=x.json")
    assert (code, err) == (
        1,
        f"--against gpufleet-dev-clustr=x.json: no stack gpufleet-dev-clustr in dev (stacks: {NETWORK}, {CLUSTER})\n",
    )
    code, _, err = run_cli("plan", "dev", "--cdk-out", assembly_dir, "--against", f"{CLUSTER}={tmp_path}/none.json")
    assert (code, err) == (1, f"--against {CLUSTER}={tmp_path}/none.json: no such file\n")
    code, _, err = run_cli(
        "plan", "dev", "--cdk-out", assembly_dir, "--against", f"{CLUSTER}={old}/{CLUSTER}.template.json"
    )
    assert (code, err) == (1, f"--against: no template given for {NETWORK}; add --against {NETWORK}=FILE\n")


def test_the_environments_image_rollout_is_printed(dev, run_cli, tmp_path):
    """dev sets no fleet.rollout: a maintain fleet's default is manual."""
    new, old = dev
    _, out, _ = run_cli("plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)), "--against", str(old))
    assert out.splitlines()[-2:] == ["fleet.rollout: manual", "running nodes unaffected"]


def changed_environment(directory: Path, name: str, change) -> None:
    document = yaml.safe_load((REPOSITORY / "environments" / f"{name}.yaml").read_text())
    change(document)
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(document))


def test_a_tag_change_on_prod_leaves_its_running_nodes_alone(assembly, tmp_path):
    """The environment's tags stay off the create-only TagSpecifications of the fleet and Tags of the placement
    group: the fleet takes the new launch template version in place."""
    environments = tmp_path / "prod-environments"
    environments.mkdir()
    changed_environment(environments, "prod", lambda document: document["tags"].update({"team": "training"}))
    changed = synthesize(tmp_path / "cdk.out", environments)
    pairs = [StackPair(name, assembly.template_json(name), changed.template_json(name)) for name in changed.stack_names]
    changes = plan_changes(pairs, "us-east-1")
    fleet = next(change for change in changes if change.resource_type == "AWS::EC2::SpotFleet")
    assert (fleet.action, fleet.node_impact) == ("in place", "in place: running nodes unaffected")
    assert [change.logical_id for change in changes if change.affects_running_nodes] == []


def test_plan_synthesizes_the_changed_environment_file_and_compares(dev, run_cli, monkeypatch):
    _, old = dev
    monkeypatch.chdir(REPOSITORY)
    changed_environment(
        Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]), "dev", lambda document: document["capacity"].update(target=3)
    )
    code, out, err = run_cli("plan", "dev", "--against", str(old))
    assert (code, err) == (0, "")
    assert out.splitlines()[3:] == [
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.TargetCapacity): "
        "in place: running nodes unaffected; launches nodes (target capacity 2 -> 3)",
        "fleet.rollout: manual",
        "1 change(s); 0 replace or terminate running nodes",
    ]
