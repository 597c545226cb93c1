"""What docs/operations/operator-policy.json scopes by holds for the resources the stacks make: the operator may
delete, export and interrupt only resources tagged gpufleet:environment, and run commands and open shells only on
nodes so tagged, so every such resource of a shipped environment must carry that tag (tests/gpufleet/
test_operator_policy.py checks the statements themselves)."""

from __future__ import annotations

from gpufleet.constants import ENVIRONMENT_TAG_KEY


def tags_of(resource: dict) -> dict[str, str]:
    tags = resource["Properties"].get("Tags", {})
    # Most types take a list of Key/Value pairs; AWS::FIS::ExperimentTemplate takes a map.
    return tags if isinstance(tags, dict) else {tag["Key"]: tag["Value"] for tag in tags}


def resources_of(template: dict, kind: str) -> dict[str, dict]:
    return {name: resource for name, resource in template["Resources"].items() if resource["Type"] == kind}


def test_what_gpufleet_down_deletes_and_exports_carries_the_environment_tag(assembly):
    storage = assembly.template_json("gpufleet-prod-storage")

    kinds = ("AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::EC2::SecurityGroup")
    for kind in kinds:
        found = resources_of(storage, kind)
        assert len(found) == 1, kind
        (resource,) = found.values()
        assert tags_of(resource)[ENVIRONMENT_TAG_KEY] == "prod", kind


def test_the_rehearsal_template_carries_the_environment_tag(assembly):
    (template,) = resources_of(assembly.template_json("gpufleet-prod-cluster"), "AWS::FIS::ExperimentTemplate").values()

    assert tags_of(template)[ENVIRONMENT_TAG_KEY] == "prod"


def test_every_node_carries_the_environment_tag_from_its_launch(assembly):
    (launch,) = resources_of(assembly.template_json("gpufleet-prod-cluster"), "AWS::EC2::LaunchTemplate").values()
    specifications = launch["Properties"]["LaunchTemplateData"]["TagSpecifications"]
    (instance,) = [spec for spec in specifications if spec["ResourceType"] == "instance"]

    assert {tag["Key"]: tag["Value"] for tag in instance["Tags"]}[ENVIRONMENT_TAG_KEY] == "prod"


def test_the_cluster_shell_document_is_named_as_the_policy_expects(assembly):
    (document,) = resources_of(assembly.template_json("gpufleet-prod-cluster"), "AWS::SSM::Document").values()

    assert document["Properties"]["Name"] == "gpufleet-prod-cluster-shell"
