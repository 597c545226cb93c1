"""The stacks of every entry of the environment matrix (tests/stacks/matrix.py), synthesized once with cdk-nag
attached (tests/stacks/conftest.py: matrix_assembly): what the cluster stack adds for which options. A network stack
only with a new VPC, a storage stack only with a new file system (storage.lustre; request-p4de mounts an existing
one), the fleet teardown only with a Spot Fleet, the capacity fallback only with fleet.fallback (wired
to the entry's node group and settings), the Capacity Block warning only with a Capacity Block, the spot interruption
rehearsal only with spot nodes, the interruption fan-out only with spot nodes and a checkpoint hook. An eks entry gets
an eks stack instead of the cluster stack."""

from __future__ import annotations

import pytest

from tests.stacks.matrix import FLEET_ENTRIES, MATRIX


def of_type(template: dict, resource_type: str) -> dict:
    return {logical_id: r for logical_id, r in template["Resources"].items() if r["Type"] == resource_type}


def fallback_settings(template: dict) -> dict | None:
    """The capacity fallback function's environment, None without the fallback."""
    functions = [
        function["Properties"]["Environment"]["Variables"]
        for function in of_type(template, "AWS::Lambda::Function").values()
        if "BACKEND" in function["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(functions) <= 1
    return functions[0] if functions else None


# Per entry: stacks; Spot Fleets, fleet teardowns, Auto Scaling groups, spot interruption rehearsals (spot nodes),
# Capacity Block warnings and interruption fan-outs (spot nodes and a checkpoint hook) in the cluster stack.
MATRIX_STACKS = {
    "spot-p4d": (["cluster", "network", "storage"], (1, 1, 0, 1, 0, 1)),
    "request-p4de": (["cluster"], (1, 1, 0, 0, 0, 0)),
    "block-p5": (["cluster", "network"], (0, 0, 1, 0, 1, 0)),
    "asg-g5": (["cluster", "network", "storage"], (0, 0, 1, 1, 0, 1)),
    "small-g5": (["cluster", "network", "storage"], (1, 1, 0, 0, 0, 0)),
}
# Per eks entry: its stacks (no cluster stack: the eks stack holds the cluster and its node groups).
MATRIX_EKS_STACKS = {
    "eks-p5": ["eks", "gpu-nodes", "network", "storage"],
    "eks-g5": ["eks", "gpu-nodes"],
}


def test_the_tables_hold_every_entry_of_the_matrix():
    assert sorted([*MATRIX_STACKS, *MATRIX_EKS_STACKS]) == sorted(MATRIX)


@pytest.mark.parametrize("name", MATRIX_EKS_STACKS)
def test_each_eks_entry_gets_an_eks_stack_and_no_cluster_stack(matrix_assembly, name):
    stacks = [stack.removeprefix(f"gpufleet-{name}-") for stack in matrix_assembly.stack_names if f"-{name}-" in stack]
    assert sorted(stacks) == MATRIX_EKS_STACKS[name]


# The capacity fallback's settings, for the entries with fleet.fallback (the others have none).
MATRIX_FALLBACKS = {
    "spot-p4d": {
        "BACKEND": "spot-fleet",
        "NODE_GROUP_ID": {"Ref": "Fleet30813DF3"},
        "PARAMETER_NAME": "/gpufleet/spot-p4d/fallback",
        "TARGET": "4",
        "FLOOR": "1",
        "AFTER_MINUTES": "20",
        "RESTORE_AFTER_MINUTES": "40",
        "MAX_EXTRA_ON_DEMAND": "3",
        # The entry has a node.checkpoint_hook: a Spot Fleet hand-back runs it before it ends a node.
        "CHECKPOINT_COMMAND": ". /etc/gpufleet/node.env && GPUFLEET_NOTICE_PATH=capacity-fallback "
        'GPUFLEET_NOTICE=hand-back bash -c "$GPUFLEET_CHECKPOINT_HOOK"',
    },
    "asg-g5": {
        "BACKEND": "auto-scaling",
        "NODE_GROUP_ID": {"Ref": "NodeGroupA8D4A5C5"},
        "PARAMETER_NAME": "/gpufleet/asg-g5/fallback",
        "TARGET": "4",
        "FLOOR": "2",
        "AFTER_MINUTES": "15",
        "RESTORE_AFTER_MINUTES": "30",
        "MAX_EXTRA_ON_DEMAND": "2",
    },
}


@pytest.mark.parametrize("name", FLEET_ENTRIES)
def test_each_entry_gets_the_stacks_and_node_group_parts_of_its_options(matrix_assembly, name):
    stacks = [stack.removeprefix(f"gpufleet-{name}-") for stack in matrix_assembly.stack_names if f"-{name}-" in stack]
    template = matrix_assembly.template_json(f"gpufleet-{name}-cluster")
    parts = tuple(
        len(of_type(template, resource_type))
        for resource_type in (
            "AWS::EC2::SpotFleet",
            "Custom::GpufleetFleetTeardown",
            "AWS::AutoScaling::AutoScalingGroup",
            "AWS::FIS::ExperimentTemplate",
        )
    ) + tuple(
        sum(
            detail_type in rule["Properties"].get("EventPattern", {}).get("detail-type", [])
            for rule in of_type(template, "AWS::Events::Rule").values()
        )
        for detail_type in ("Capacity Block Expiration Warning", "EC2 Spot Instance Interruption Warning")
    )
    assert (sorted(stacks), parts) == MATRIX_STACKS[name]


@pytest.mark.parametrize("name", FLEET_ENTRIES)
def test_the_capacity_fallback_comes_only_with_fleet_fallback_and_takes_its_settings(matrix_assembly, name):
    assert fallback_settings(matrix_assembly.template_json(f"gpufleet-{name}-cluster")) == MATRIX_FALLBACKS.get(name)


@pytest.mark.parametrize("name", FLEET_ENTRIES)
def test_every_cluster_stack_keeps_the_efa_security_groups_logical_id(matrix_assembly, name):
    """tests/stacks/constructs/test_efa_security_group.py says why a new logical id would break a running cluster."""
    template = matrix_assembly.template_json(f"gpufleet-{name}-cluster")
    assert list(of_type(template, "AWS::EC2::SecurityGroup")) == ["EfaSecurityGroup84B158D9"]
