"""The configuration's vocabulary where it must match AWS's own spellings."""

from __future__ import annotations


def test_the_auto_scaling_spellings_are_those_of_the_group_schema():
    """Each mapped strategy is one the AWS::AutoScaling::AutoScalingGroup schema's InstancesDistribution describes
    as a valid value (cfn-lint's bundled schema lists them in the property descriptions, as `+ value`)."""
    import re

    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    from gpufleet.constants import (
        ALLOCATION_STRATEGIES,
        AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES,
        AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES,
        ON_DEMAND_ALLOCATION_STRATEGIES,
    )

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::AutoScaling::AutoScalingGroup").schema
    distribution = schema["definitions"]["InstancesDistribution"]["properties"]

    def documented(name):
        return set(re.findall(r"\+ ([a-z-]+) ", distribution[name]["description"]))

    assert documented("SpotAllocationStrategy") == {
        "capacity-optimized",
        "capacity-optimized-prioritized",
        "lowest-price",
        "price-capacity-optimized",
    }
    assert set(AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES.values()) == documented("SpotAllocationStrategy")
    assert set(AUTO_SCALING_SPOT_ALLOCATION_STRATEGIES) == set(ALLOCATION_STRATEGIES) - {"diversified"}
    assert documented("OnDemandAllocationStrategy") == {"lowest-price", "prioritized"}
    assert set(AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES.values()) == documented("OnDemandAllocationStrategy")
    assert set(AUTO_SCALING_ON_DEMAND_ALLOCATION_STRATEGIES) == set(ON_DEMAND_ALLOCATION_STRATEGIES)
    assert schema["properties"]["CapacityRebalance"]["type"] == "boolean"
