"""What a deploy will do: compare synthesized templates with deployed (or saved) ones, resource by resource.

A changed property replaces its resource when the resource type's schema lists it in ``createOnlyProperties``
(source: the CloudFormation resource provider schemas that cfn-lint bundles, read through
cfnlint.schema.PROVIDER_SCHEMA_MANAGER; https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/
resource-type-schema.html#schema-properties-createonlyproperties). A replaced resource gets a new physical id, so
every Ref, Fn::GetAtt and (across stacks) Fn::ImportValue of it changes value at deploy: the properties that use
them count as changed too, which can replace their resources in turn. A changed logical id is a removal and an
addition.

Node impact comes from where the nodes live: the node group (a Spot Fleet or an Auto Scaling group, by
fleet.backend; the eks flavour's EKS managed node groups) owns them, and the resources it reaches through its
references (launch template, placement group, security group, subnet, VPC) hold them. Two custom resources size an
Auto Scaling group from outside it: GroupCapacity (gpufleet.constants.GROUP_CAPACITY_RESOURCE_TYPE) sets the desired
capacity of a group without a block to its Target at the deploy, and BlockCapacity (BLOCK_CAPACITY_RESOURCE_TYPE)
schedules a Capacity Block group's Target nodes from the block's Start until its scale-in before End; what a change to
either launches or terminates is said with when.

A template parameter of a Systems Manager type (the node image: AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>)
holds an SSM parameter's key, and CloudFormation "always fetches the latest values from Parameter Store when it
updates stacks" (CloudFormation user guide, Systems Manager parameter types, https://docs.aws.amazon.com/
AWSCloudFormation/latest/UserGuide/systems-manager-parameter-types.html): a deploy changes what refers to such a
parameter when the key holds a new value, although no template text changed. The value a stack resolved at its
last deploy is in DescribeStacks Parameters[].ResolvedValue ("returned only for Systems Manager parameter types in
the template": botocore's cloudformation model, shape Parameter). A plan takes, per stack, the parameters that
resolve to a new value and counts every reference to them as changed; for parameters it could not read it plans
once more as if they had changed, to say what a deploy would then do to running nodes.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.block_schedule import scale_in_time
from gpufleet.constants import (
    BLOCK_CAPACITY_RESOURCE_TYPE,
    FLAVOUR_FLEET,
    GROUP_CAPACITY_RESOURCE_TYPE,
    ROLLOUT_REPLACE_ALL,
)

FLEET_TYPE = "AWS::EC2::SpotFleet"
AUTO_SCALING_GROUP_TYPE = "AWS::AutoScaling::AutoScalingGroup"
# The eks flavour's node groups (stacks/eks_cluster_stack.py): EKS managed node groups.
MANAGED_NODE_GROUP_TYPE = "AWS::EKS::Nodegroup"
# The resources that own running nodes: one per fleet.backend, and the eks flavour's managed node groups.
NODE_GROUP_TYPES = frozenset({FLEET_TYPE, AUTO_SCALING_GROUP_TYPE, MANAGED_NODE_GROUP_TYPE})
# What a managed node group rolls out to every node when it changes in place: a launch template (id or version: the
# eks stack's groups take the template's LatestVersionNumber, which a changed template raises) or an AMI release.
# "It creates a new Amazon EC2 launch template version for the Auto Scaling group ... It repeats the previous upgrade
# steps until there are no nodes in the node group that are deployed with the earlier version of the launch template"
# (awsdocs/amazon-eks-user-guide latest/ug/nodes/managed-node-update-behavior.adoc at 0bfeeaf2); the default strategy
# launches the new nodes first and drains each old node's pods (15 minutes, then PodEvictionFailure).
ROLLED_OUT_NODE_GROUP_PROPERTIES = ("LaunchTemplate", "ReleaseVersion", "Version")
# What a managed node group that launches nodes does when EC2 is short of them: EKS fails the group
# ("InsufficientInstanceCapacity ... CREATE_FAILED", aws/containers-roadmap#2204), and CloudFormation rolls back the
# deploy of the stack that holds it, only that one (the eks flavour keeps its GPU groups in a stack of their own:
# stacks/eks_gpu_nodes_stack.py).
SHORT_OF_CAPACITY = "short of EC2 capacity, EKS fails the group and CloudFormation rolls back the deploy of {stack}"
LAUNCH_TEMPLATE_TYPE = "AWS::EC2::LaunchTemplate"
# Resources running instances sit in: replacing or removing one of those the fleet uses strands its nodes.
NODE_HOSTING_TYPES = frozenset(
    {"AWS::EC2::PlacementGroup", "AWS::EC2::Subnet", "AWS::EC2::SecurityGroup", "AWS::EC2::VPC"}
)
# Attributes that take a new value on an in-place update: an updated launch template gets a new version.
# source: https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-ec2-launchtemplate.html
# (Fn::GetAtt LatestVersionNumber, DefaultVersionNumber; "a new version" on update of LaunchTemplateData)
ATTRIBUTES_CHANGED_BY_UPDATE = {LAUNCH_TEMPLATE_TYPE: frozenset({"LatestVersionNumber", "DefaultVersionNumber"})}
# CDK's bookkeeping resource: its Analytics string changes with the construct tree, never with the cluster.
IGNORED_TYPES = frozenset({"AWS::CDK::Metadata"})
# Template parameter types whose value CloudFormation fetches from Parameter Store at every deploy (source: the user
# guide page in the module doc: the Value<...> types; AWS::SSM::Parameter::Name is the key itself, not resolved).
SSM_PARAMETER_TYPE_PREFIX = "AWS::SSM::Parameter::Value<"

REPLACES_NODES = "replaces running nodes"
TERMINATES_NODES = "terminates nodes"
LAUNCHES_NODES = "launches nodes"
NEW_VERSION = "in place: new launch template version, new nodes only"
IN_PLACE = "in place: running nodes unaffected"
NO_NODE_EFFECT = "no effect on nodes"
RUNNING_NODES_UNAFFECTED = "running nodes unaffected"
NODE_AFFECTING = frozenset({REPLACES_NODES, TERMINATES_NODES})

# What a deploy-time parameter does at the next deploy.
UNCHANGED = "unchanged"
NEW_VALUE = "new value"
CANNOT_TELL = "cannot tell"

_MISSING = object()


@dataclass
class Change:
    stack: str
    logical_id: str
    resource_type: str
    action: str  # added | removed | in place | replacement
    properties: list[str] = field(default_factory=list)
    replacing: list[str] = field(default_factory=list)  # the create-only ones among them
    node_impact: str = NO_NODE_EFFECT

    @property
    def affects_running_nodes(self) -> bool:
        return self.node_impact.startswith(tuple(NODE_AFFECTING))

    def line(self) -> str:
        because = f" ({', '.join(self.replacing or self.properties)})" if self.properties or self.replacing else ""
        return f"{self.stack} {self.logical_id} [{self.resource_type}] {self.action}{because}: {self.node_impact}"

    def as_dict(self) -> dict:
        return {
            "stack": self.stack,
            "logical_id": self.logical_id,
            "type": self.resource_type,
            "action": self.action,
            "properties": self.properties,
            "replacing_properties": self.replacing,
            "node_impact": self.node_impact,
            "affects_running_nodes": self.affects_running_nodes,
        }


def create_only_pointers(region: str, resource_type: str) -> list[str]:
    """The schema's createOnlyProperties (JSON pointers); none for types without a schema (custom resources)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER, ResourceNotFoundError

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, resource_type)
    except ResourceNotFoundError:
        return []
    return list(schema.schema.get("createOnlyProperties", []))


def values_at(properties: dict, pointer: str):
    """The value a createOnlyProperties pointer names (``/properties/A/B``); ``*`` walks every list item."""
    parts = pointer.split("/")[2:]

    def walk(value, rest):
        if not rest:
            return value
        if rest[0] == "*":
            if isinstance(value, list):
                return [walk(item, rest[1:]) for item in value]
            return _MISSING
        if isinstance(value, dict) and rest[0] in value:
            return walk(value[rest[0]], rest[1:])
        return _MISSING

    return walk(properties, parts)


def changed_paths(old, new, prefix: str = "") -> list[str]:
    """Dotted paths of what differs, descending through objects (not lists: a list changes as a whole)."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict) and not (_is_intrinsic(old) or _is_intrinsic(new)):
        paths = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            paths.extend(changed_paths(old.get(key, _MISSING), new.get(key, _MISSING), path))
        return paths
    return [prefix]


def _is_intrinsic(value: dict) -> bool:
    """{"Ref": ...} or {"Fn::...": ...}: a value computed at deploy, compared whole."""
    return len(value) == 1 and any(key == "Ref" or key.startswith("Fn::") for key in value)


class _NewValue:
    """Stands for a reference whose value changes at deploy; never equal to the old template's text."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __eq__(self, other) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<new {self.what}>"


def _mark_new_references(value, replaced: set[str], updated: dict[str, str], new_exports: set[str]):
    """A copy of value with every reference that changes at deploy replaced by a _NewValue."""
    if isinstance(value, list):
        return [_mark_new_references(item, replaced, updated, new_exports) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref" and argument in replaced:
            return _NewValue(argument)
        if function == "Fn::GetAtt":
            target, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            if target in replaced or attribute in ATTRIBUTES_CHANGED_BY_UPDATE.get(updated.get(target, ""), ()):
                return _NewValue(f"{target}.{attribute}")
        if function == "Fn::ImportValue" and isinstance(argument, str) and argument in new_exports:
            return _NewValue(argument)
    return {key: _mark_new_references(item, replaced, updated, new_exports) for key, item in value.items()}


def _references(value) -> set[str]:
    """Logical ids a value refers to (Ref, Fn::GetAtt) and export names it imports (as 'import:NAME')."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= _references(item)
    elif isinstance(value, dict):
        for function, argument in value.items():
            if function == "Ref" and isinstance(argument, str):
                found.add(argument)
            elif function == "Fn::GetAtt":
                found.add(argument[0] if isinstance(argument, list) else argument.split(".", 1)[0])
            elif function == "Fn::ImportValue" and isinstance(argument, str):
                found.add(f"import:{argument}")
            found |= _references(argument)
    return found


@dataclass
class StackPair:
    name: str
    old: dict  # {} when the stack is not deployed yet
    new: dict  # {} when the stack is no longer synthesized
    # Logical ids of the template parameters that resolve to a new value at the deploy.
    new_parameter_values: frozenset[str] = frozenset()

    def resources(self, which: str) -> dict:
        template = self.old if which == "old" else self.new
        return {k: v for k, v in template.get("Resources", {}).items() if v.get("Type") not in IGNORED_TYPES}


def plan_changes(pairs: Iterable[StackPair], region: str) -> list[Change]:
    """Every resource change across the stacks, with its node impact; replacements propagate through references
    inside a stack and through exports across stacks until nothing more changes."""
    pairs = list(pairs)
    changes: dict[tuple[str, str], Change] = {}
    # By stack, what every Ref to takes a new value at deploy: replaced and removed resources, and parameters.
    replaced: dict[str, set[str]] = {pair.name: set(pair.new_parameter_values) for pair in pairs}
    updated: dict[str, dict[str, str]] = {pair.name: {} for pair in pairs}
    while True:
        new_exports = _exports_changing(pairs, replaced)
        before = {key: (c.action, tuple(c.properties)) for key, c in changes.items()}
        for pair in pairs:
            for change in _stack_changes(pair, region, replaced[pair.name], updated[pair.name], new_exports):
                changes[(pair.name, change.logical_id)] = change
                if change.action in ("replacement", "removed"):
                    replaced[pair.name].add(change.logical_id)
                elif change.action == "in place":
                    updated[pair.name][change.logical_id] = change.resource_type
        if before == {key: (c.action, tuple(c.properties)) for key, c in changes.items()}:
            break
    result = list(changes.values())
    _judge_node_impact(result, pairs)
    return sorted(result, key=lambda c: ([p.name for p in pairs].index(c.stack), c.logical_id))


def _exports_changing(pairs: list[StackPair], replaced: dict[str, set[str]]) -> set[str]:
    """Export names whose value changes: their output refers to a replaced resource."""
    names = set()
    for pair in pairs:
        for output in pair.new.get("Outputs", {}).values():
            export = output.get("Export", {}).get("Name")
            if isinstance(export, str) and _references(output.get("Value")) & replaced[pair.name]:
                names.add(export)
    return names


def _stack_changes(
    pair: StackPair, region: str, replaced: set[str], updated: dict[str, str], new_exports: set[str]
) -> list[Change]:
    """The stack's changes, given what earlier passes found replaced and updated in place (by logical id)."""
    old_resources, new_resources = pair.resources("old"), pair.resources("new")
    updated = updated | {
        logical_id: resource["Type"]
        for logical_id, resource in new_resources.items()
        if logical_id in old_resources and old_resources[logical_id].get("Properties") != resource.get("Properties")
    }
    changes = []
    for logical_id in sorted(set(old_resources) | set(new_resources)):
        old, new = old_resources.get(logical_id), new_resources.get(logical_id)
        if new is None:
            changes.append(Change(pair.name, logical_id, old_resources[logical_id]["Type"], "removed"))
            continue
        if old is None:
            changes.append(Change(pair.name, logical_id, new["Type"], "added"))
            continue
        if old["Type"] != new["Type"]:
            changes.append(Change(pair.name, logical_id, new["Type"], "replacement", ["Type"], ["Type"]))
            continue
        old_properties = old.get("Properties", {})
        new_properties = _mark_new_references(copy.deepcopy(new.get("Properties", {})), replaced, updated, new_exports)
        properties = changed_paths(old_properties, new_properties)
        if not properties:
            continue
        replacing = [
            pointer.removeprefix("/properties/").replace("/", ".")
            for pointer in create_only_pointers(region, new["Type"])
            if values_at(old_properties, pointer) != values_at(new_properties, pointer)
        ]
        action = "replacement" if replacing else "in place"
        changes.append(Change(pair.name, logical_id, new["Type"], action, properties, replacing))
    return changes


def _fleet_dependencies(pairs: list[StackPair]) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(stack, logical id) of every node group (Spot Fleet, Auto Scaling group), old or new, and of everything
    they reach through references, across stacks through exports."""
    by_export: dict[str, set[tuple[str, str]]] = {}
    for pair in pairs:
        for template in (pair.old, pair.new):
            for output in template.get("Outputs", {}).values():
                export = output.get("Export", {}).get("Name")
                if isinstance(export, str):
                    by_export.setdefault(export, set()).update(
                        (pair.name, ref) for ref in _references(output.get("Value"))
                    )
    fleets = {
        (pair.name, logical_id)
        for pair in pairs
        for which in ("old", "new")
        for logical_id, resource in pair.resources(which).items()
        if resource.get("Type") in NODE_GROUP_TYPES
    }
    reached, todo = set(fleets), list(fleets)
    templates = {pair.name: pair for pair in pairs}
    while todo:
        stack, logical_id = todo.pop()
        pair = templates[stack]
        for which in ("old", "new"):
            resource = pair.resources(which).get(logical_id)
            if resource is None:
                continue
            for ref in _references(resource.get("Properties", {})):
                targets = (
                    by_export.get(ref.removeprefix("import:"), set()) if ref.startswith("import:") else {(stack, ref)}
                )
                for target in targets - reached:
                    reached.add(target)
                    todo.append(target)
    return fleets, reached


def _judge_node_impact(changes: list[Change], pairs: list[StackPair]) -> None:
    fleets, fleet_uses = _fleet_dependencies(pairs)
    fleet_replaced = any((c.stack, c.logical_id) in fleets and c.action in ("replacement", "removed") for c in changes)
    templates = {pair.name: pair for pair in pairs}
    for change in changes:
        key = (change.stack, change.logical_id)
        pair = templates[change.stack]
        if change.resource_type in NODE_GROUP_TYPES:
            change.node_impact = _fleet_impact(change, pair)
        elif change.resource_type == BLOCK_CAPACITY_RESOURCE_TYPE and change.action in ("in place", "added"):
            change.node_impact = _block_capacity_impact(*_properties(pair, change.logical_id))
        elif change.resource_type == GROUP_CAPACITY_RESOURCE_TYPE and change.action in ("in place", "added"):
            change.node_impact = _capacity_impact(change, *_properties(pair, change.logical_id))
        elif key not in fleet_uses:
            change.node_impact = NO_NODE_EFFECT
        elif change.resource_type in NODE_HOSTING_TYPES and change.action in ("replacement", "removed"):
            # With the fleet replaced too, its new nodes come up in the new resource; otherwise the running nodes
            # stay in the old one, which the deploy deletes.
            change.node_impact = REPLACES_NODES if fleet_replaced else TERMINATES_NODES
        elif change.resource_type == LAUNCH_TEMPLATE_TYPE and change.action == "in place":
            change.node_impact = NEW_VERSION
        elif change.action == "added":
            change.node_impact = RUNNING_NODES_UNAFFECTED
        else:
            change.node_impact = IN_PLACE


def _fleet_impact(change: Change, pair: StackPair) -> str:
    if change.action == "replacement":
        return REPLACES_NODES
    if change.action == "removed":
        return TERMINATES_NODES
    if change.action == "added":
        if change.resource_type == MANAGED_NODE_GROUP_TYPE:
            return f"{LAUNCHES_NODES}; {SHORT_OF_CAPACITY.format(stack=change.stack)}"
        return LAUNCHES_NODES
    if change.resource_type == AUTO_SCALING_GROUP_TYPE:
        return _group_impact(pair.resources("old")[change.logical_id], pair.resources("new")[change.logical_id])
    if change.resource_type == MANAGED_NODE_GROUP_TYPE:
        return _managed_node_group_impact(change, *_properties(pair, change.logical_id))
    old = pair.resources("old")[change.logical_id]["Properties"]["SpotFleetRequestConfigData"]
    new = pair.resources("new")[change.logical_id]["Properties"]["SpotFleetRequestConfigData"]
    old_target, new_target = old.get("TargetCapacity"), new.get("TargetCapacity")
    if isinstance(old_target, int) and isinstance(new_target, int) and old_target != new_target:
        if new_target > old_target:
            return f"{IN_PLACE}; launches nodes (target capacity {old_target} -> {new_target})"
        # source: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifySpotFleetRequest.html
        # ExcessCapacityTerminationPolicy "default": Spot Fleet terminates instances above the new target.
        if new.get("ExcessCapacityTerminationPolicy", "default") != "noTermination":
            return f"{TERMINATES_NODES} (target capacity {old_target} -> {new_target})"
    return IN_PLACE


def _group_impact(old: dict, new: dict) -> str:
    """An Auto Scaling group updated in place: a new desired capacity launches or terminates nodes; a new on-demand
    split replaces nodes gradually, new ones first (the AWS::AutoScaling::AutoScalingGroup schema's description of
    InstancesDistribution.OnDemandBaseCapacity and OnDemandPercentageAboveBaseCapacity: "An update to this setting
    means a gradual replacement of instances"); anything else, the launch template version included, leaves the
    running nodes alone."""
    old_properties, new_properties = old.get("Properties", {}), new.get("Properties", {})
    old_target, new_target = old_properties.get("DesiredCapacity"), new_properties.get("DesiredCapacity")
    if sized := _size_change(old_target, new_target):
        if int(new_target) > int(old_target):
            return f"{IN_PLACE}; launches nodes (desired capacity {sized})"
        return f"{TERMINATES_NODES} (desired capacity {sized})"
    # "If you specify a new value for MaxSize without specifying a value for DesiredCapacity, and the new MaxSize is
    # smaller than the current size of the group, this sets the group's DesiredCapacity to the new MaxSize value"
    # (UpdateAutoScalingGroup, botocore's autoscaling model): nodes above the new maximum go.
    old_maximum, new_maximum = old_properties.get("MaxSize"), new_properties.get("MaxSize")
    if (sized := _size_change(old_maximum, new_maximum)) and int(new_maximum) < int(old_maximum):
        return f"{TERMINATES_NODES} above the new maximum (maximum size {sized})"
    distribution_path = ("MixedInstancesPolicy", "InstancesDistribution")
    old_split, new_split = (_on_demand_split(p, distribution_path) for p in (old_properties, new_properties))
    if old_split != new_split:
        return f"{REPLACES_NODES} (on-demand base and share {old_split} -> {new_split}, new nodes first)"
    return IN_PLACE


def _managed_node_group_impact(change: Change, old: dict | None, new: dict) -> str:
    """An EKS managed node group updated in place: a rolled-out property (ROLLED_OUT_NODE_GROUP_PROPERTIES) replaces
    every node, new ones first; a new desired size launches or terminates nodes; labels, taints and the rest leave the
    running nodes alone."""
    rolled_out = sorted(
        {path.split(".")[0] for path in change.properties if path.split(".")[0] in ROLLED_OUT_NODE_GROUP_PROPERTIES}
    )
    if rolled_out:
        return (
            f"{REPLACES_NODES} (managed node group rolling update for {', '.join(rolled_out)}: new nodes first, each "
            "old node drained of its pods)"
        )
    old_size = (old or {}).get("ScalingConfig", {}).get("DesiredSize")
    new_size = new.get("ScalingConfig", {}).get("DesiredSize")
    if sized := _size_change(old_size, new_size):
        if int(new_size) > int(old_size):
            return f"{IN_PLACE}; launches nodes (desired size {sized}); {SHORT_OF_CAPACITY.format(stack=change.stack)}"
        return f"{TERMINATES_NODES} (desired size {sized})"
    return IN_PLACE


def _properties(pair: StackPair, logical_id: str) -> tuple[dict | None, dict]:
    """A resource's properties in the deployed template (None when it is new there) and in the new one."""
    old = pair.resources("old").get(logical_id)
    return (None if old is None else old.get("Properties", {})), pair.resources("new")[logical_id].get("Properties", {})


def _size_change(old, new) -> str:
    """The text "OLD -> NEW" when both are numbers (a template writes sizes as numbers or strings) and differ, else
    an empty one."""
    if old != new and str(old).isdigit() and str(new).isdigit() and int(old) != int(new):
        return f"{old} -> {new}"
    return ""


def _moment(value: dt.datetime) -> str:
    """A time as the operator commands print times."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _block_window(properties: dict) -> tuple[int, dt.datetime, dt.datetime]:
    """A BlockCapacity resource's nodes and window: Target nodes from Start until the scale-in before End (template
    dates "YYYY-MM-DDThh:mm:ssZ", which gpufleet.ops.template_shape checks)."""
    end = dt.datetime.fromisoformat(properties["End"])
    return int(properties["Target"]), dt.datetime.fromisoformat(properties["Start"]), scale_in_time(end, FLAVOUR_FLEET)


def _window_text(window: tuple[int, dt.datetime, dt.datetime]) -> str:
    nodes, start, scale_in = window
    return f"{nodes} node(s) from {_moment(start)} until {_moment(scale_in)}"


def _block_capacity_impact(old: dict | None, new: dict) -> str:
    """The BlockCapacity resource gives its group the block's nodes from Start and none from the scale-in, as the time
    of the deploy finds them (gpufleet.block_schedule): a deploy inside the window launches them at once. Fewer nodes,
    a later start or an earlier end take nodes that the old window gave, whenever they run."""
    window = _block_window(new)
    if old is None:
        return f"{RUNNING_NODES_UNAFFECTED}; launches {_window_text(window)} (at once inside that window)"
    before = _block_window(old)
    if window == before:
        return IN_PLACE
    (nodes, start, scale_in), (old_nodes, old_start, old_scale_in) = window, before
    change = f"{_window_text(before)} -> {_window_text(window)}"
    if nodes < old_nodes or start > old_start or scale_in < old_scale_in:
        return f"{TERMINATES_NODES} ({change})"
    return f"{IN_PLACE}; launches nodes ({change})"


def _capacity_impact(change: Change, old: dict | None, new: dict) -> str:
    """The GroupCapacity resource sets its group's desired capacity to Target when it is created and when the group
    or the target changes; under rollout replace-all a new group's resource waits for the new nodes."""
    target = new.get("Target")
    if old is None:
        return f"{RUNNING_NODES_UNAFFECTED}; launches nodes up to desired capacity {target}"
    if "AutoScalingGroupName" in change.properties:
        waits = "; the deploy waits until they are InService" if new.get("Rollout") == ROLLOUT_REPLACE_ALL else ""
        return f"{IN_PLACE}; launches nodes in the new group (desired capacity {target}){waits}"
    if sized := _size_change(old.get("Target"), target):
        if int(new["Target"]) > int(old["Target"]):
            return f"{IN_PLACE}; launches nodes (desired capacity {sized})"
        return f"{TERMINATES_NODES} (desired capacity {sized})"
    return IN_PLACE


def _on_demand_split(properties: dict, path: tuple[str, ...]) -> tuple:
    distribution = properties
    for key in path:
        distribution = distribution.get(key, {})
    return distribution.get("OnDemandBaseCapacity"), distribution.get("OnDemandPercentageAboveBaseCapacity")


def ssm_parameter_defaults(template: dict) -> dict[str, str]:
    """The template's parameters of a Systems Manager type that some resource refers to, by logical id: the SSM key
    each defaults to. (CDK's BootstrapVersion is of such a type too, but only a rule refers to it.)"""
    referred = _references(list(template.get("Resources", {}).values()))
    return {
        logical_id: str(parameter.get("Default", ""))
        for logical_id, parameter in template.get("Parameters", {}).items()
        if str(parameter.get("Type", "")).startswith(SSM_PARAMETER_TYPE_PREFIX) and logical_id in referred
    }


@dataclass(frozen=True)
class DeployTimeParameter:
    """A parameter of a deployed stack that CloudFormation resolves from Parameter Store at the deploy: the value the
    stack resolved at its last deploy and the one its key holds now, or why they could not be compared."""

    stack: str
    logical_id: str
    key: str  # the SSM parameter the deploy resolves
    deployed: str | None = None
    current: str | None = None
    cannot_tell: str = ""  # why deployed and current could not both be read
    ignored_default: str = ""  # the template's default, when the deploy resolves another key (see key_note)

    @property
    def outcome(self) -> str:
        if self.cannot_tell:
            return CANNOT_TELL
        return UNCHANGED if self.deployed == self.current else NEW_VALUE

    def line(self) -> str:
        where = f"{self.stack} {self.logical_id}"
        if self.outcome == CANNOT_TELL:
            said = f"{where}: cannot tell what SSM parameter {self.key} resolves to at the deploy: {self.cannot_tell}"
        elif self.outcome == UNCHANGED:
            said = f"{where}: SSM parameter {self.key} still holds {self.current}, the value of the last deploy"
        else:
            said = (
                f"{where}: SSM parameter {self.key} resolved to {self.deployed} at the last deploy and holds "
                f"{self.current} now: the deploy takes the new value"
            )
        return f"{said}; {self.key_note()}" if self.ignored_default else said

    def key_note(self) -> str:
        # The CDK CLI sends UsePreviousValue for every parameter a deployed stack has (`cdk deploy
        # --previous-parameters`, default true: aws/aws-cdk-cli packages/aws-cdk/lib/cli/cli-config.ts and cli.ts;
        # packages/@aws-cdk/toolkit-lib/lib/api/deployments/cfn-api.ts, ParameterValues), and for an SSM parameter
        # type that keeps the key, not the value (the user guide page in the module doc): a new default in the
        # template is not used.
        return (
            f"the template's default is now {self.ignored_default}, which cdk deploy does not use for a deployed "
            "stack (it keeps the stack's key; --no-previous-parameters takes the default)"
        )

    def as_dict(self) -> dict:
        return {
            "stack": self.stack,
            "logical_id": self.logical_id,
            "ssm_parameter": self.key,
            "deployed_value": self.deployed,
            "current_value": self.current,
            "outcome": self.outcome,
            "cannot_tell": self.cannot_tell or None,
            "ignored_default": self.ignored_default or None,
        }


@dataclass
class Plan:
    changes: list[Change]
    # Changes that replace or terminate running nodes if the parameters that could not be read resolve to new
    # values (beyond those in changes).
    possible: list[Change]


def plan_deploy(pairs: Iterable[StackPair], parameters: Iterable[DeployTimeParameter], region: str) -> Plan:
    """The changes of a deploy whose deploy-time parameters resolve as `parameters` say; where one cannot be told,
    the node-affecting changes a new value there would add."""
    pairs, parameters = list(pairs), list(parameters)

    def with_new_values(outcomes: set[str]) -> list[StackPair]:
        return [
            StackPair(
                pair.name,
                pair.old,
                pair.new,
                frozenset(p.logical_id for p in parameters if p.stack == pair.name and p.outcome in outcomes),
            )
            for pair in pairs
        ]

    changes = plan_changes(with_new_values({NEW_VALUE}), region)
    if not any(p.outcome == CANNOT_TELL for p in parameters):
        return Plan(changes, [])
    certain = {(c.stack, c.logical_id) for c in changes if c.affects_running_nodes}
    possible = [
        change
        for change in plan_changes(with_new_values({NEW_VALUE, CANNOT_TELL}), region)
        if change.affects_running_nodes and (change.stack, change.logical_id) not in certain
    ]
    return Plan(changes, possible)
