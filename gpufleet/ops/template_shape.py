"""The shape of a CloudFormation template that gpufleet plan compares. gpufleet/ops/plan.py indexes templates freely,
so every template plan reads from a file is checked here first: a damaged one is one line naming the file, the path
of keys to what is wrong and the fix, never a KeyError deep in the comparison.

What the comparison relies on, and so what is checked:
- the template is an object with Resources (the one section a template must have, and each resource must have a
  Type: CloudFormation user guide, "CloudFormation template Resources syntax",
  https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/resources-section-structure.html), an object of
  logical id to an object with a string Type and, when present, an object Properties;
- a Spot Fleet's Properties hold an object SpotFleetRequestConfigData; an Auto Scaling group's MixedInstancesPolicy
  and its InstancesDistribution, when present, are objects, and its DesiredCapacity, when a string, is digits; an
  EKS managed node group's ScalingConfig, when present, is an object; a BlockCapacity resource's Target is a node
  count and its Start and End are UTC times as the construct writes them;
- Parameters and Outputs, when present, are objects of objects; an output's Export, when present, is an object;
- every Ref names a logical id (a string), every Fn::GetAtt is [RESOURCE, ATTRIBUTE] or "RESOURCE.ATTRIBUTE";
- nothing is nested deeper than MAX_NESTING: the comparison recurses through values (copy.deepcopy among others).
A change to gpufleet/ops/plan.py that reads more of a template adds its rule here.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from gpufleet.constants import BLOCK_CAPACITY_RESOURCE_TYPE
from gpufleet.input_files import JsonFile, item_path
from gpufleet.ops.plan import AUTO_SCALING_GROUP_TYPE, FLEET_TYPE, MANAGED_NODE_GROUP_TYPE

# gpufleet's templates nest at most 15 levels (the network stack's); 64 is far beyond any template and far below
# what Python's recursion limit (1000 frames, several per level in copy.deepcopy) allows.
MAX_NESTING = 64
_NODE_COUNT = re.compile(r"[0-9]{1,9}")
# The block's dates as stacks/constructs/block_capacity/infrastructure.py writes them (TIME_FORMAT).
_UTC_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def checked_template(template: JsonFile) -> dict:
    """The template's document, once it has the shape the comparison relies on (the module doc)."""
    document = template.document
    for logical_id, resource in template.get(document, ("Resources",), dict).items():
        path = ("Resources", logical_id)
        resource_type = template.get(resource, (*path, "Type"), str)
        properties = template.get(resource, (*path, "Properties"), dict, default={})
        if resource_type == FLEET_TYPE:
            template.get(properties, (*path, "Properties", "SpotFleetRequestConfigData"), dict)
        elif resource_type == AUTO_SCALING_GROUP_TYPE:
            _check_group(template, properties, (*path, "Properties"))
        elif resource_type == MANAGED_NODE_GROUP_TYPE:
            template.get(properties, (*path, "Properties", "ScalingConfig"), dict, default={})
        elif resource_type == BLOCK_CAPACITY_RESOURCE_TYPE:
            _check_block_capacity(template, properties, (*path, "Properties"))
    parameters = template.get(document, ("Parameters",), dict, default={})
    for logical_id in parameters:
        template.get(parameters, ("Parameters", logical_id), dict)
    outputs = template.get(document, ("Outputs",), dict, default={})
    for logical_id in outputs:
        output = template.get(outputs, ("Outputs", logical_id), dict)
        template.get(output, ("Outputs", logical_id, "Export"), dict, default={})
    _check_references(template)
    return document


def _check_group(template: JsonFile, properties: dict, path: tuple[str, ...]) -> None:
    policy = template.get(properties, (*path, "MixedInstancesPolicy"), dict, default={})
    template.get(policy, (*path, "MixedInstancesPolicy", "InstancesDistribution"), dict, default={})
    desired = properties.get("DesiredCapacity")
    if isinstance(desired, str) and not _NODE_COUNT.fullmatch(desired):
        raise template.problem((*path, "DesiredCapacity"), 'a node count such as "2"', desired)


def _check_block_capacity(template: JsonFile, properties: dict, path: tuple[str, ...]) -> None:
    target = properties.get("Target")
    if isinstance(target, bool) or not (isinstance(target, int) or _NODE_COUNT.fullmatch(str(target))):
        raise template.problem((*path, "Target"), 'a node count such as "2"', target)
    for key in ("Start", "End"):
        moment = properties.get(key)
        if not (isinstance(moment, str) and _UTC_TIME.fullmatch(moment) and _is_time(moment)):
            raise template.problem((*path, key), 'a UTC time such as "2027-01-11T11:30:00Z"', moment)


def _is_time(text: str) -> bool:
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _check_references(template: JsonFile) -> None:
    """Every Ref and Fn::GetAtt of the template, and its depth; walked without recursion."""
    todo: list[tuple[int, tuple[str, ...], Any]] = [(0, (), template.document)]
    while todo:
        depth, path, value = todo.pop()
        if depth > MAX_NESTING:
            raise template.error(path[:4], f"nested more than {MAX_NESTING} levels deep, far deeper than a template")
        if isinstance(value, list):
            todo.extend((depth + 1, item_path(path, index), item) for index, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        if "Ref" in value and not isinstance(value["Ref"], str):
            raise template.problem((*path, "Ref"), "a logical id", value["Ref"])
        if "Fn::GetAtt" in value and not _is_get_att(value["Fn::GetAtt"]):
            raise template.problem(
                (*path, "Fn::GetAtt"), '[RESOURCE, ATTRIBUTE] or "RESOURCE.ATTRIBUTE"', value["Fn::GetAtt"]
            )
        todo.extend((depth + 1, (*path, key), item) for key, item in value.items())


def _is_get_att(argument: Any) -> bool:
    if isinstance(argument, str):
        return "." in argument
    return isinstance(argument, list) and len(argument) == 2 and all(isinstance(part, str) for part in argument)
