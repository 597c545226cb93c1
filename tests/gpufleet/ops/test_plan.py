"""gpufleet plan: resource changes between synthesized templates and deployed or saved ones, and their node impact.

Pairs of templates come from one synthesis of the shipped environments (the `assembly` fixture), edited where a
test needs one specific change; the end-to-end tests synthesize a changed environment file once more.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from gpufleet.ops.plan import StackPair, plan_changes, ssm_parameter_defaults, values_at
from tests.answering import client_error
from tests.conftest import REPOSITORY, synthesize

NETWORK, CLUSTER = "gpufleet-dev-network", "gpufleet-dev-cluster"
FLEET, LAUNCH_TEMPLATE = "Fleet30813DF3", "NodeLaunchTemplateCABE86F2"
SUBNET = "VpcnodesSubnet1Subnet50682361"
# The node image parameter of the cluster stack: its logical id as CDK names it, the SSM key dev resolves.
IMAGE_PARAMETER = "NodeLaunchTemplateNodeImageParameter4F083533"
IMAGE_KEY = "/gpufleet/ami/p4d-ubuntu1804-cuda11"
DEPLOYED_IMAGE, NEW_IMAGE = "ami-0123456789abcdef0", "ami-0fedcba9876543210"
# What an offline plan (--against) says of the image parameter.
IMAGE_NOT_READ = (
    f"  {CLUSTER} {IMAGE_PARAMETER}: cannot tell what SSM parameter {IMAGE_KEY} resolves to at the deploy: "
    "--against reads nothing from AWS"
)


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
        IMAGE_NOT_READ,
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


def test_the_deployed_template_comes_from_get_template_original(dev, answered, run_cli, tmp_path):
    new, old = dev
    fleet_config(new[CLUSTER])["TerminateInstancesWithExpiration"] = False

    def get_template(params):
        if params["StackName"] == CLUSTER:
            return client_error("ValidationError", f"Stack with id {CLUSTER} does not exist")
        return {"TemplateBody": (old / f"{params['StackName']}.template.json").read_text()}

    cloudformation = answered("cloudformation", {"GetTemplate": get_template})
    code, out, _ = run_cli("plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)))
    lines = out.splitlines()
    assert code == 0
    assert lines[1:3] == [
        f"  {NETWORK}: against deployed stack {NETWORK}",
        f"  {CLUSTER}: against nothing deployed: new stack",
    ]
    assert f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] added: launches nodes" in lines
    assert not any(line.startswith(NETWORK) for line in lines)
    # A stack not deployed yet has no resolved parameters to read.
    assert sorted(cloudformation, key=str) == [
        ("GetTemplate", {"StackName": CLUSTER, "TemplateStage": "Original"}),
        ("GetTemplate", {"StackName": NETWORK, "TemplateStage": "Original"}),
    ]


def test_bad_against_arguments_are_one_line_each(dev, run_cli, tmp_path):
    new, old = dev
    assembly_dir = str(write_assembly(tmp_path / "new", new))
    code, _, err = run_cli("plan", "dev", "--cdk-out", assembly_dir, "--against", "gpufleet-dev-clustr=x.json")
    assert (code, err) == (
        1,
        f"--against gpufleet-dev-clustr=x.json: no stack gpufleet-dev-clustr in dev (stacks: {NETWORK}, {CLUSTER})\n",
    )
    code, _, err = run_cli(
        "plan", "dev", "--cdk-out", assembly_dir, "--against", f"{CLUSTER}={old}/{CLUSTER}.template.json"
    )
    assert (code, err) == (1, f"--against: no template given for {NETWORK}; add --against {NETWORK}=FILE\n")


# What plan says to do about a damaged file, by where the file came from.
CDK_OUT_FIX = "synthesize it again (make synth), or leave out --cdk-out"
AGAINST_FIX = "save the template again, or leave out --against to compare with the deployed stacks"
CDK_JSON_FIX = "restore the checkout's cdk.json (git checkout cdk.json)"


def edit_json(path: Path, edit) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


# Damaged input (issue 23, plan): each case but the missing file ended in a traceback before (JSONDecodeError,
# UnicodeDecodeError, KeyError, AttributeError, TypeError, ValueError, IsADirectoryError). Now one line names the
# file, where in it, and the fix; exit 1.
@pytest.mark.parametrize(
    "damage, problem",
    [
        (
            lambda out: (out / "manifest.json").write_text('{"artifacts": {"gpufleet-dev-cluster": {"type": "aws'),
            f"manifest.json: line 1 column 49: not valid JSON (Unterminated string starting at); {CDK_OUT_FIX}",
        ),
        (
            lambda out: (out / "manifest.json").write_text('{"version": "48.0.0"}'),
            f"manifest.json: artifacts: missing; {CDK_OUT_FIX}",
        ),
        (
            lambda out: edit_json(out / "manifest.json", lambda m: m["artifacts"][CLUSTER].pop("properties")),
            f"manifest.json: artifacts.gpufleet-dev-cluster.properties: missing; {CDK_OUT_FIX}",
        ),
        (
            lambda out: edit_json(
                out / "manifest.json",
                lambda m: m["artifacts"][CLUSTER]["properties"].update(templateFile=f"../old/{CLUSTER}.template.json"),
            ),
            "manifest.json: artifacts.gpufleet-dev-cluster.properties.templateFile: expected a file in the cloud "
            f'assembly, got "../old/gpufleet-dev-cluster.template.js...; {CDK_OUT_FIX}',
        ),
        (
            lambda out: edit_json(
                out / "manifest.json", lambda m: m["artifacts"][CLUSTER]["properties"].update(templateFile="/etc/hosts")
            ),
            "manifest.json: artifacts.gpufleet-dev-cluster.properties.templateFile: expected a file in the cloud "
            f'assembly, got "/etc/hosts"; {CDK_OUT_FIX}',
        ),
        (
            lambda out: edit_json(
                out / "manifest.json", lambda m: m["artifacts"][CLUSTER]["properties"].update(templateFile="")
            ),
            "manifest.json: artifacts.gpufleet-dev-cluster.properties.templateFile: expected a file in the cloud "
            f'assembly, got ""; {CDK_OUT_FIX}',
        ),
        (
            lambda out: edit_json(
                out / "manifest.json", lambda m: m["artifacts"][CLUSTER]["properties"].update(templateFile="t\0.json")
            ),
            "manifest.json: artifacts.gpufleet-dev-cluster.properties.templateFile: expected a file in the cloud "
            f'assembly, got "t\\u0000.json"; {CDK_OUT_FIX}',
        ),
        (
            lambda out: edit_json(
                out / "manifest.json",
                lambda m: m["artifacts"].update({"gpufleet-dev-\u2028x": m["artifacts"][CLUSTER]}),
            ),
            f'manifest.json: artifacts: "gpufleet-dev-\\u2028x" is not a stack name; {CDK_OUT_FIX}',
        ),
        (
            lambda out: (out / f"{CLUSTER}.template.json").write_bytes(b"{\n\xff}"),
            f"{CLUSTER}.template.json: line 2: not UTF-8 text (byte 0xff: invalid start byte); {CDK_OUT_FIX}",
        ),
        (
            lambda out: edit_json(out / f"{CLUSTER}.template.json", lambda t: t.update(Resources=[])),
            f"{CLUSTER}.template.json: Resources: expected an object, got []; {CDK_OUT_FIX}",
        ),
        (
            lambda out: edit_json(
                out / f"{CLUSTER}.template.json",
                lambda t: resource(t, LAUNCH_TEMPLATE)["LaunchTemplateData"].update(ImageId={"Fn::GetAtt": "Image"}),
            ),
            f"{CLUSTER}.template.json: Resources.{LAUNCH_TEMPLATE}.Properties.LaunchTemplateData.ImageId.Fn::GetAtt: "
            f'expected [RESOURCE, ATTRIBUTE] or "RESOURCE.ATTRIBUTE", got "Image"; {CDK_OUT_FIX}',
        ),
    ],
    ids=["truncated manifest", "artifacts missing", "properties missing", "template outside", "template absolute",
         "template empty", "template NUL",
         "stack name", "template not UTF-8", "resources a list", "get-att without attribute"],
)  # fmt: skip
def test_a_damaged_cdk_out_is_one_line_naming_the_file(dev, run_cli, tmp_path, damage, problem):
    new, old = dev
    cdk_out = write_assembly(tmp_path / "new", new)
    damage(cdk_out)
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(cdk_out), "--against", str(old))
    assert (code, out, err.splitlines()) == (1, "", [f"{cdk_out}/{problem}"])


@pytest.mark.parametrize(
    "damage, problem",
    [
        (
            lambda path: path.write_text("<html>Not Found</html>"),
            f"line 1 column 1: not valid JSON (Expecting value); {AGAINST_FIX}",
        ),
        (
            lambda path: path.write_bytes(path.read_bytes().replace(b"Resources", b"Resources\xe9", 1)),
            f"line 3: not UTF-8 text (byte 0xe9: invalid continuation byte); {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t.update(Resources=[])),
            f"Resources: expected an object, got []; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t["Resources"][FLEET].pop("Type")),
            f"Resources.{FLEET}.Type: missing; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t["Resources"][FLEET].update(Type=["AWS::EC2::SpotFleet"])),
            f'Resources.{FLEET}.Type: expected a string, got ["AWS::EC2::SpotFleet"]; {AGAINST_FIX}',
        ),
        (
            lambda path: edit_json(path, lambda t: t["Resources"][LAUNCH_TEMPLATE].update(Properties="x")),
            f'Resources.{LAUNCH_TEMPLATE}.Properties: expected an object, got "x"; {AGAINST_FIX}',
        ),
        (
            lambda path: edit_json(path, lambda t: t["Resources"][FLEET]["Properties"].clear()),
            f"Resources.{FLEET}.Properties.SpotFleetRequestConfigData: missing; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t.update(Parameters=[])),
            f"Parameters: expected an object, got []; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t["Parameters"].update({IMAGE_PARAMETER: "ami"})),
            f'Parameters.{IMAGE_PARAMETER}: expected an object, got "ami"; {AGAINST_FIX}',
        ),
        (
            lambda path: edit_json(path, lambda t: t.update(Outputs=[])),
            f"Outputs: expected an object, got []; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t["Outputs"].update(AvailabilityZone=1)),
            f"Outputs.AvailabilityZone: expected an object, got 1; {AGAINST_FIX}",
        ),
        (
            lambda path: edit_json(path, lambda t: t["Outputs"]["AvailabilityZone"].update(Export="x")),
            f'Outputs.AvailabilityZone.Export: expected an object, got "x"; {AGAINST_FIX}',
        ),
        (
            lambda path: edit_json(
                path, lambda t: fleet_config(t).update(IamFleetRole={"Fn::GetAtt": ["FleetRole"]})
            ),
            f"Resources.{FLEET}.Properties.SpotFleetRequestConfigData.IamFleetRole.Fn::GetAtt: expected "
            f'[RESOURCE, ATTRIBUTE] or "RESOURCE.ATTRIBUTE", got ["FleetRole"]; {AGAINST_FIX}',
        ),
        (
            lambda path: edit_json(path, lambda t: fleet_config(t).update(IamFleetRole={"Ref": ["FleetRole"]})),
            f"Resources.{FLEET}.Properties.SpotFleetRequestConfigData.IamFleetRole.Ref: expected a logical id, "
            f'got ["FleetRole"]; {AGAINST_FIX}',
        ),
    ],
    ids=["not JSON", "not UTF-8", "resources a list", "no type", "type a list", "properties a string",
         "fleet without config", "parameters a list", "parameter a string", "outputs a list", "output a number",
         "export a string", "short get-att",
         "ref a list"],
)  # fmt: skip
def test_a_damaged_against_template_is_one_line_naming_the_file(dev, run_cli, tmp_path, damage, problem):
    new, old = dev
    cdk_out = write_assembly(tmp_path / "new", new)
    template = old / f"{CLUSTER}.template.json"
    damage(template)
    for against in ([str(old)], [f"{CLUSTER}={template}", f"{NETWORK}={old}/{NETWORK}.template.json"]):
        code, out, err = run_cli("plan", "dev", "--cdk-out", str(cdk_out), *(f"--against={a}" for a in against))
        assert (code, out, err.splitlines()) == (1, "", [f"{template}: {problem}"])


GROUP = "NodeGroupA8D4A5C5"  # p5-block's Auto Scaling group


@pytest.mark.parametrize(
    "properties, problem",
    [
        # "²" is a digit to str.isdigit() but not to int(): the comparison of the group's sizes took it and failed.
        ({"DesiredCapacity": "²"}, 'DesiredCapacity: expected a node count such as "2", got "\\u00b2"'),
        ({"MixedInstancesPolicy": "x"}, 'MixedInstancesPolicy: expected an object, got "x"'),
        (
            {"MixedInstancesPolicy": {"InstancesDistribution": []}},
            "MixedInstancesPolicy.InstancesDistribution: expected an object, got []",
        ),
    ],
    ids=["desired capacity", "mixed instances policy", "instances distribution"],
)
def test_a_damaged_auto_scaling_group_is_one_line(assembly, run_cli, tmp_path, properties, problem):
    shutil.copy(REPOSITORY / "environments" / "p5-block.yaml", os.environ["GPUFLEET_ENVIRONMENTS_DIR"])
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("gpufleet-p5-block-network", "gpufleet-p5-block-cluster"):
        shutil.copy(assembly.template_file(name), saved)
    template = saved / "gpufleet-p5-block-cluster.template.json"
    edit_json(template, lambda t: resource(t, GROUP).update(properties))
    code, _, err = run_cli("plan", "p5-block", "--cdk-out", str(assembly.directory), "--against", str(saved))
    assert (code, err.splitlines()) == (1, [f"{template}: Resources.{GROUP}.Properties.{problem}; {AGAINST_FIX}"])


BLOCK_CAPACITY = "NodeGroupBlockCapacity5D2E1478"  # p5-block's schedule (stacks/constructs/block_capacity/)
TIME_PROBLEM = 'expected a UTC time such as "2027-01-11T11:30:00Z", got'


@pytest.mark.parametrize(
    "properties, problem",
    [
        ({"Target": "²"}, 'Target: expected a node count such as "2", got "\\u00b2"'),
        ({"Target": True}, 'Target: expected a node count such as "2", got true'),
        ({"Start": "2027-01-11 11:30"}, f'Start: {TIME_PROBLEM} "2027-01-11 11:30"'),
        ({"End": "2027-13-18T11:30:00Z"}, f'End: {TIME_PROBLEM} "2027-13-18T11:30:00Z"'),
        ({"End": 5}, f"End: {TIME_PROBLEM} 5"),
    ],
    ids=["target not a count", "target a boolean", "start without its zone", "end in no month", "end a number"],
)
def test_a_damaged_block_capacity_is_one_line(assembly, run_cli, tmp_path, properties, problem):
    """plan reads the block's Target, Start and End to say when nodes come and go."""
    shutil.copy(REPOSITORY / "environments" / "p5-block.yaml", os.environ["GPUFLEET_ENVIRONMENTS_DIR"])
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("gpufleet-p5-block-network", "gpufleet-p5-block-cluster"):
        shutil.copy(assembly.template_file(name), saved)
    template = saved / "gpufleet-p5-block-cluster.template.json"
    edit_json(template, lambda t: resource(t, BLOCK_CAPACITY).update(properties))
    code, _, err = run_cli("plan", "p5-block", "--cdk-out", str(assembly.directory), "--against", str(saved))
    prefix = f"Resources.{BLOCK_CAPACITY}.Properties."
    assert (code, err.splitlines()) == (1, [f"{template}: {prefix}{problem}; {AGAINST_FIX}"])


def test_an_against_file_that_does_not_exist_is_one_line(dev, run_cli, tmp_path):
    new, old = dev
    cdk_out = str(write_assembly(tmp_path / "new", new))
    network = f"--against={NETWORK}={old}/{NETWORK}.template.json"
    code, _, err = run_cli("plan", "dev", "--cdk-out", cdk_out, network, f"--against={CLUSTER}={tmp_path}/none.json")
    assert (code, err) == (1, f"{tmp_path}/none.json: cannot read file (No such file or directory)\n")


def test_an_against_file_that_is_a_directory_is_one_line(dev, run_cli, tmp_path):
    new, old = dev
    cdk_out = str(write_assembly(tmp_path / "new", new))
    network = f"--against={NETWORK}={old}/{NETWORK}.template.json"
    code, _, err = run_cli("plan", "dev", "--cdk-out", cdk_out, network, f"--against={CLUSTER}={old}")
    assert (code, err) == (1, f"{old}: cannot read file (Is a directory)\n")


def test_a_template_nested_deeper_than_any_template_is_refused(dev, run_cli, tmp_path):
    new, old = dev
    cdk_out = write_assembly(tmp_path / "new", new)
    template = cdk_out / f"{CLUSTER}.template.json"
    nested: dict = {}
    for _ in range(600):
        nested = {"Tags": nested}
    edit_json(template, lambda t: resource(t, LAUNCH_TEMPLATE).update(LaunchTemplateData=nested))
    code, _, err = run_cli("plan", "dev", "--cdk-out", str(cdk_out), "--against", str(old))
    assert (code, err.splitlines()) == (
        1,
        [
            f"{template}: Resources.{LAUNCH_TEMPLATE}.Properties.LaunchTemplateData: nested more than 64 levels deep, "
            f"far deeper than a template; {CDK_OUT_FIX}"
        ],
    )


@pytest.mark.parametrize(
    "cdk_json, problem",
    [
        ('{"app": "python3 app.py", "context": {', "line 1 column 39: not valid JSON (Expecting property name "
         "enclosed in double quotes)"),
        ('["python3 app.py"]', '(file): expected an object, got ["python3 app.py"]'),
        ('{"app": "python3 app.py", "context": []}', "context: expected an object, got []"),
    ],
    ids=["truncated", "a list", "context a list"],
)  # fmt: skip
def test_a_damaged_cdk_json_is_one_line_before_synthesizing(dev, run_cli, tmp_path, monkeypatch, cdk_json, problem):
    _, old = dev
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "app.py").write_text("raise SystemExit('app.py ran')\n")
    (checkout / "cdk.json").write_text(cdk_json)
    monkeypatch.chdir(checkout)
    code, out, err = run_cli("plan", "dev", "--against", str(old))
    assert (code, out, err.splitlines()) == (1, "", [f"{checkout}/cdk.json: {problem}; {CDK_JSON_FIX}"])


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
        IMAGE_NOT_READ,
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.TargetCapacity): "
        "in place: running nodes unaffected; launches nodes (target capacity 2 -> 3)",
        "fleet.rollout: manual",
        "1 change(s); 0 replace or terminate running nodes",
    ]


@pytest.fixture(scope="module")
def replace_all_dev(tmp_path_factory):
    """dev with fleet.rollout replace-all, synthesized: the fleet's create-only tags carry the resolved image."""
    environments = tmp_path_factory.mktemp("replace-all-environments")
    changed_environment(environments, "dev", lambda document: document["fleet"].update(rollout="replace-all"))
    return synthesize(tmp_path_factory.mktemp("replace-all.out"), environments)


def deployed(
    answered,
    templates: dict[str, dict],
    resolved: dict[str, str],
    holds: dict[str, str | dict],
    keys: dict[str, str] | None = None,
    describe_error: dict | None = None,
):
    """AWS as a deploy of `templates` left it, answering what plan reads (moto 5.2.5 answers DescribeStacks without
    ResolvedValue, and with the resolved value as ParameterValue: moto/cloudformation/models.py, parameter_list).
    CloudFormation: GetTemplate gives the template; DescribeStacks (or describe_error) gives its parameters, each
    with the key from `keys` or its default and ResolvedValue from `resolved`, by logical id. Parameter Store holds
    `holds`: by key, a value or a client_error. Returns the calls made to CloudFormation and to Parameter Store."""

    def stack(params):
        return templates[params["StackName"]]

    def describe(params):
        if describe_error:
            return describe_error
        parameters = [
            {"ParameterKey": name, "ParameterValue": (keys or {}).get(name, parameter["Default"])}
            | ({"ResolvedValue": resolved[name]} if name in resolved else {})
            for name, parameter in stack(params).get("Parameters", {}).items()
        ]
        return {
            "Stacks": [
                {
                    "StackName": params["StackName"],
                    "CreationTime": dt.datetime(2026, 5, 4, 9, 30, tzinfo=dt.UTC),
                    "StackStatus": "UPDATE_COMPLETE",
                    "Parameters": parameters,
                }
            ]
        }

    def parameter(params):
        held = holds.get(params["Name"], client_error("ParameterNotFound", ""))
        if isinstance(held, dict):
            return held
        return {"Parameter": {"Name": params["Name"], "Type": "String", "Value": held, "DataType": "aws:ec2:image"}}

    cloudformation = answered(
        "cloudformation",
        {
            "GetTemplate": lambda params: {"TemplateBody": json.dumps(stack(params))},
            "DescribeStacks": describe,
        },
    )
    return cloudformation, answered("ssm", {"GetParameter": parameter})


def rollout(name: str, value: str) -> None:
    """The shipped environment NAME, with fleet.rollout VALUE, as the environment file plan loads."""
    changed_environment(Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]), name, lambda d: d["fleet"].update(rollout=value))


def test_a_new_image_under_replace_all_replaces_every_node_and_exits_3(replace_all_dev, answered, run_cli, tmp_path):
    """The templates are the same; the image parameter holds a new image since the last deploy, which the fleet's
    create-only gpufleet:image tag carries: the deploy replaces the fleet and every node."""
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    deployed(answered, templates, {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {IMAGE_KEY: NEW_IMAGE})
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert code == 3
    assert out.splitlines() == [
        "Plan dev (us-east-1):",
        f"  {NETWORK}: against deployed stack {NETWORK}",
        f"  {CLUSTER}: against deployed stack {CLUSTER}",
        f"  {CLUSTER} {IMAGE_PARAMETER}: SSM parameter {IMAGE_KEY} resolved to {DEPLOYED_IMAGE} at the last deploy "
        f"and holds {NEW_IMAGE} now: the deploy takes the new value",
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] replacement (SpotFleetRequestConfigData.TagSpecifications): "
        "replaces running nodes",
        f"{CLUSTER} FleetTeardown6AA62985 [Custom::GpufleetFleetTeardown] in place (FleetRequestId): "
        "no effect on nodes",
        f"{CLUSTER} FleetTeardownHandlerRoleDefaultPolicyDB68C174 [AWS::IAM::Policy] in place "
        "(PolicyDocument.Statement): no effect on nodes",
        f"{CLUSTER} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.ImageId): "
        "in place: new launch template version, new nodes only",
        "fleet.rollout: replace-all",
        "4 change(s); 1 replace or terminate running nodes",
    ]
    assert err == "dev: this deploy replaces or terminates running nodes; rerun with --allow-replace to accept\n"


def test_the_same_image_under_replace_all_leaves_running_nodes_alone(replace_all_dev, answered, run_cli):
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    cloudformation, ssm = deployed(answered, templates, {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {IMAGE_KEY: DEPLOYED_IMAGE})
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "Plan dev (us-east-1):",
        f"  {NETWORK}: against deployed stack {NETWORK}",
        f"  {CLUSTER}: against deployed stack {CLUSTER}",
        f"  {CLUSTER} {IMAGE_PARAMETER}: SSM parameter {IMAGE_KEY} still holds {DEPLOYED_IMAGE}, the value of the "
        "last deploy",
        "no changes",
        "fleet.rollout: replace-all",
        "running nodes unaffected",
    ]
    # The network stack has no parameter a resource refers to (only CDK's BootstrapVersion, which a rule reads).
    assert sorted(cloudformation, key=str) == [
        ("DescribeStacks", {"StackName": CLUSTER}),
        ("GetTemplate", {"StackName": CLUSTER, "TemplateStage": "Original"}),
        ("GetTemplate", {"StackName": NETWORK, "TemplateStage": "Original"}),
    ]
    assert ssm == [("GetParameter", {"Name": IMAGE_KEY})]


def test_a_new_image_under_manual_is_a_new_launch_template_version_only(dev, answered, run_cli, tmp_path):
    new, _ = dev
    deployed(answered, copy.deepcopy(new), {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {IMAGE_KEY: NEW_IMAGE})
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)))
    assert (code, err) == (0, "")
    assert out.splitlines()[3:] == [
        f"  {CLUSTER} {IMAGE_PARAMETER}: SSM parameter {IMAGE_KEY} resolved to {DEPLOYED_IMAGE} at the last deploy "
        f"and holds {NEW_IMAGE} now: the deploy takes the new value",
        f"{CLUSTER} {FLEET} [AWS::EC2::SpotFleet] in place (SpotFleetRequestConfigData.LaunchTemplateConfigs): "
        "in place: running nodes unaffected",
        f"{CLUSTER} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.ImageId): "
        "in place: new launch template version, new nodes only",
        "fleet.rollout: manual",
        "2 change(s); 0 replace or terminate running nodes",
    ]


def test_a_new_image_replaces_a_request_fleet(assembly, answered, run_cli):
    """h100's fleet is a request fleet: its create-only tags carry the launch template version, which a new image
    moves on."""
    changed_environment(Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]), "h100", lambda document: None)
    cluster = "gpufleet-h100-cluster"
    key = "/gpufleet/ami/ubuntu2204-cuda12"
    deployed(answered, {cluster: assembly.template_json(cluster)}, {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {key: NEW_IMAGE})
    code, out, _ = run_cli("plan", "h100", "--cdk-out", str(assembly.directory))
    assert code == 3
    assert out.splitlines() == [
        "Plan h100 (us-west-2):",
        f"  {cluster}: against deployed stack {cluster}",
        f"  {cluster} {IMAGE_PARAMETER}: SSM parameter {key} resolved to {DEPLOYED_IMAGE} at the last deploy and "
        f"holds {NEW_IMAGE} now: the deploy takes the new value",
        f"{cluster} {FLEET} [AWS::EC2::SpotFleet] replacement (SpotFleetRequestConfigData.TagSpecifications): "
        "replaces running nodes",
        f"{cluster} FleetTeardown6AA62985 [Custom::GpufleetFleetTeardown] in place (FleetRequestId): "
        "no effect on nodes",
        f"{cluster} FleetTeardownHandlerRoleDefaultPolicyDB68C174 [AWS::IAM::Policy] in place "
        "(PolicyDocument.Statement): no effect on nodes",
        f"{cluster} {LAUNCH_TEMPLATE} [AWS::EC2::LaunchTemplate] in place (LaunchTemplateData.ImageId): "
        "in place: new launch template version, new nodes only",
        "fleet.rollout: replace-all",
        "4 change(s); 1 replace or terminate running nodes",
    ]


# What replace-all dev would do if its image parameter resolved to a new value.
IF_NEW_IMAGE = (
    f"if {IMAGE_PARAMETER} resolves to a new value: {CLUSTER} {FLEET} [AWS::EC2::SpotFleet] replacement "
    "(SpotFleetRequestConfigData.TagSpecifications): replaces running nodes"
)
CANNOT_TELL_SUMMARY = (
    "cannot tell whether running nodes are replaced: 1 change(s) replace or terminate them if "
    f"{IMAGE_PARAMETER} resolves to a new value"
)
CANNOT_TELL_ERROR = (
    f"dev: cannot tell whether this deploy replaces running nodes ({IMAGE_PARAMETER} not read); "
    "rerun with --allow-replace to accept\n"
)


@pytest.mark.parametrize(
    ("holds", "describe_error", "why"),
    [
        ({}, None, "it does not exist in us-east-1 (ParameterNotFound), so the deploy fails until it does"),
        (
            {IMAGE_KEY: client_error("AccessDeniedException", "not authorized to perform: ssm:GetParameter")},
            None,
            "access denied to GetParameter in us-east-1 (AccessDeniedException): grant that action to your IAM role "
            "or user",
        ),
        (
            {IMAGE_KEY: DEPLOYED_IMAGE},
            client_error("AccessDenied", "not authorized to perform: cloudformation:DescribeStacks"),
            "access denied to DescribeStacks in us-east-1 (AccessDenied): grant that action to your IAM role or user",
        ),
    ],
    ids=["parameter deleted", "parameter denied", "stack parameters denied"],
)
def test_an_image_parameter_that_cannot_be_read_under_replace_all_exits_4(
    replace_all_dev, answered, run_cli, holds, describe_error, why
):
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    deployed(answered, templates, {IMAGE_PARAMETER: DEPLOYED_IMAGE}, holds, describe_error=describe_error)
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert (code, err) == (4, CANNOT_TELL_ERROR)
    assert out.splitlines()[3:] == [
        f"  {CLUSTER} {IMAGE_PARAMETER}: cannot tell what SSM parameter {IMAGE_KEY} resolves to at the deploy: {why}",
        "no changes",
        IF_NEW_IMAGE,
        "fleet.rollout: replace-all",
        CANNOT_TELL_SUMMARY,
    ]
    code, _, err = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory), "--allow-replace")
    assert (code, err) == (0, "")


def test_an_offline_plan_of_replace_all_cannot_tell_and_exits_4(replace_all_dev, run_cli):
    rollout("dev", "replace-all")
    code, out, err = run_cli(
        "plan", "dev", "--cdk-out", str(replace_all_dev.directory), "--against", str(replace_all_dev.directory)
    )
    assert (code, err) == (4, CANNOT_TELL_ERROR)
    assert out.splitlines()[3:] == [
        IMAGE_NOT_READ,
        "no changes",
        IF_NEW_IMAGE,
        "fleet.rollout: replace-all",
        CANNOT_TELL_SUMMARY,
    ]


def test_an_image_parameter_that_cannot_be_read_under_manual_is_said_and_exits_0(dev, answered, run_json, tmp_path):
    new, _ = dev
    deployed(answered, copy.deepcopy(new), {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {})
    code, document = run_json("plan", "dev", "--cdk-out", str(write_assembly(tmp_path / "new", new)))
    assert code == 0
    assert document["parameters"] == [
        {
            "stack": CLUSTER,
            "logical_id": IMAGE_PARAMETER,
            "ssm_parameter": IMAGE_KEY,
            "deployed_value": DEPLOYED_IMAGE,
            "current_value": None,
            "outcome": "cannot tell",
            "cannot_tell": "it does not exist in us-east-1 (ParameterNotFound), so the deploy fails until it does",
            "ignored_default": None,
        }
    ]
    assert (document["changes"], document["changes_if_unread_parameters_are_new"]) == ([], [])
    assert (document["replaces_running_nodes"], document["cannot_tell_whether_running_nodes_are_replaced"]) == (
        False,
        False,
    )


def test_a_stack_without_a_resolved_value_cannot_tell(replace_all_dev, answered, run_cli):
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    _, ssm = deployed(answered, templates, {}, {IMAGE_KEY: DEPLOYED_IMAGE})
    code, out, _ = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert code == 4
    assert out.splitlines()[3] == (
        f"  {CLUSTER} {IMAGE_PARAMETER}: cannot tell what SSM parameter {IMAGE_KEY} resolves to at the deploy: "
        "DescribeStacks shows no value the stack resolved"
    )
    assert ssm == []


def test_the_deploy_resolves_the_stacks_key_not_a_new_default(replace_all_dev, answered, run_cli):
    """The stack was deployed with another ami.ssm_parameter: cdk deploy keeps that key (UsePreviousValue), so plan
    reads that one and says the template's new default goes unused."""
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    old_key = "/gpufleet/ami/p4d-ubuntu2004-cuda11"
    _, ssm = deployed(
        answered,
        templates,
        {IMAGE_PARAMETER: DEPLOYED_IMAGE},
        {old_key: DEPLOYED_IMAGE, IMAGE_KEY: NEW_IMAGE},
        keys={IMAGE_PARAMETER: old_key},
    )
    code, out, _ = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert code == 0
    assert out.splitlines()[3] == (
        f"  {CLUSTER} {IMAGE_PARAMETER}: SSM parameter {old_key} still holds {DEPLOYED_IMAGE}, the value of the last "
        f"deploy; the template's default is now {IMAGE_KEY}, which cdk deploy does not use for a deployed stack (it "
        "keeps the stack's key; --no-previous-parameters takes the default)"
    )
    assert ssm == [("GetParameter", {"Name": old_key})]


def test_a_failed_read_of_the_parameter_is_one_line_and_exit_1(replace_all_dev, answered, run_cli):
    rollout("dev", "replace-all")
    templates = {name: replace_all_dev.template_json(name) for name in (NETWORK, CLUSTER)}
    throttled = client_error("ThrottlingException", "Rate exceeded")
    deployed(answered, templates, {IMAGE_PARAMETER: DEPLOYED_IMAGE}, {IMAGE_KEY: throttled})
    code, out, err = run_cli("plan", "dev", "--cdk-out", str(replace_all_dev.directory))
    assert (code, out) == (1, "")
    assert err == (
        "AWS throttled GetParameter in us-east-1 (ThrottlingException) after 8 attempts: wait a minute and retry, "
        "or stop other tools calling the same API\n"
    )


def test_only_ssm_parameters_a_resource_refers_to_are_resolved_at_deploy(assembly):
    """CDK's BootstrapVersion is an SSM parameter too, read by a rule only."""
    assert ssm_parameter_defaults(assembly.template_json(CLUSTER)) == {IMAGE_PARAMETER: IMAGE_KEY}
    assert ssm_parameter_defaults(assembly.template_json(NETWORK)) == {}


# What cdk destroy --all deletes and keeps (gpufleet/ops/destroy.py; tests/gpufleet/ops/test_destroy.py).
PROD_STORAGE_KEEPS = (
    "FileSystemSecurityGroupBFA44C6B (AWS::EC2::SecurityGroup), FileServersTcp988 (AWS::EC2::SecurityGroupIngress), "
    "FileServersTcp1018 (AWS::EC2::SecurityGroupIngress), FileSystem (AWS::FSx::FileSystem), "
    "DataRepositoryAssociation (AWS::FSx::DataRepositoryAssociation), Bucket83908E77 (AWS::S3::Bucket), "
    "BucketPolicyE9A3008A (AWS::S3::BucketPolicy)"
)


def destroy_section(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("cdk destroy"))
    end = next(index for index, line in enumerate(lines) if line.startswith("fleet.rollout"))
    return lines[start:end]


def shipped_prod() -> None:
    shutil.copy(REPOSITORY / "environments" / "prod.yaml", Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]))


def test_plan_says_destroy_deletes_prods_cluster_and_stops_at_its_protected_storage(assembly, run_cli):
    shipped_prod()
    directory = str(assembly.directory)
    _, out, _ = run_cli("plan", "prod", "--cdk-out", directory, "--against", directory)

    assert destroy_section(out) == [
        "cdk destroy --all -c env=prod keeps some of it:",
        "  gpufleet-prod-cluster: deleted",
        "  gpufleet-prod-storage: kept: termination protection stops cdk destroy here; deleting it leaves "
        f"{PROD_STORAGE_KEEPS} (DeletionPolicy Retain)",
        "  gpufleet-prod-network: kept: gpufleet-prod-storage stays and depends on it",
    ]


def test_plan_says_nothing_of_destroy_where_it_removes_the_whole_environment(assembly, run_cli, run_json):
    directory = str(assembly.directory)
    _, out, _ = run_cli("plan", "dev", "--cdk-out", directory, "--against", directory)
    _, document = run_json("plan", "dev", "--cdk-out", directory, "--against", directory)

    assert "destroy" not in out
    assert document["destroy"] == [
        {
            "stack": "gpufleet-dev-cluster",
            "deleted": True,
            "why": "deleted",
            "kept_resources": [],
            "service_leftovers": [],
        },
        {
            "stack": "gpufleet-dev-network",
            "deleted": True,
            "why": "deleted",
            "kept_resources": [],
            "service_leftovers": [],
        },
    ]


def test_plan_says_destroy_removes_the_whole_eks_environment_log_group_included(assembly, run_cli, run_json):
    """p5-eks's stack makes the control plane's log group, so nothing is left for plan to name."""
    shutil.copy(REPOSITORY / "environments" / "p5-eks.yaml", Path(os.environ["GPUFLEET_ENVIRONMENTS_DIR"]))
    directory = str(assembly.directory)
    _, out, _ = run_cli("plan", "p5-eks", "--cdk-out", directory, "--against", directory)
    _, document = run_json("plan", "p5-eks", "--cdk-out", directory, "--against", directory)

    assert "destroy" not in out
    assert [(stack["stack"], stack["deleted"], stack["service_leftovers"]) for stack in document["destroy"]] == [
        ("gpufleet-p5-eks-gpu-nodes", True, []),
        ("gpufleet-p5-eks-eks", True, []),
        ("gpufleet-p5-eks-network", True, []),
    ]


def test_plan_json_says_what_destroy_deletes_and_keeps(assembly, run_json):
    shipped_prod()
    directory = str(assembly.directory)
    _, document = run_json("plan", "prod", "--cdk-out", directory, "--against", directory)

    assert [(stack["stack"], stack["deleted"], len(stack["kept_resources"])) for stack in document["destroy"]] == [
        ("gpufleet-prod-cluster", True, 0),
        ("gpufleet-prod-storage", False, 7),
        ("gpufleet-prod-network", False, 0),
    ]
    assert document["destroy"][1]["kept_resources"][3] == "FileSystem (AWS::FSx::FileSystem)"
