"""How a Spot Fleet in maintain mode and an Auto Scaling group with a mixed instances policy behave, minute by minute,
written from AWS's documentation: each rule names its source, or says (unconfirmed) where AWS does not say; where
the behaviour matters and AWS is silent, the model takes it as an option (Unknowns) and the fallback must be right
under each value. tests/fallback_model/test_model_rules.py has a test per rule.

Sources, abbreviated in the rules:
- [modify-spot-fleet]: EC2 user guide, "Modify a Spot Fleet request"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/modify-spot-fleet.html): "When you increase the total target
  capacity, the Spot Fleet launches additional Spot Instances ... When you increase the On-Demand portion, the Spot
  Fleet launches additional On-Demand Instances. When you decrease the total target capacity, the Spot Fleet cancels
  any open requests that exceed the new target capacity. You can request that the Spot Fleet terminate Spot
  Instances until the size of the fleet reaches the new target capacity ... Alternatively, you can request that the
  Spot Fleet keep the fleet at its current size, but not replace any Spot Instances that are interrupted or that you
  terminate manually." "When a Spot Fleet terminates an instance because the target capacity was decreased, the
  instance receives a Spot Instance interruption notice." Nothing about a decrease of the On-Demand portion alone.
- [ModifySpotFleetRequest], [DescribeSpotFleetRequestHistory], [DescribeSpotFleetInstances], [EventInformation],
  [DescribeInstances], [UpdateAutoScalingGroup], [InstancesDistribution], [DescribeScalingActivities],
  [AutoScalingGroup.Status], [CommandInvocationStatus]: botocore's service models (ec2, autoscaling, ssm), the
  documentation of that operation or shape.
- [spot-interruptions]: EC2 user guide, "Spot Instance interruption notices": a two-minute warning through instance
  metadata (spot/instance-action) before EC2 stops or terminates the instance; scripts/node/spot-watcher.sh runs the
  checkpoint hook on it.
- [maintain]: EC2 user guide, Spot Fleet request types: a maintain fleet "maintains the target capacity" and replaces
  interrupted Spot Instances (gpu-cluster-facts: `Type`: maintain replaces interrupted capacity).
- [lifecycle-hooks]: EC2 Auto Scaling user guide, lifecycle hooks: a terminating instance waits in Terminating:Wait
  until the hook is completed or times out; scripts/node/spot-watcher.sh reads Terminated from
  autoscaling/target-lifecycle-state, runs the hook and completes the action.
- [OnDemandBaseCapacity]: AWS::AutoScaling::AutoScalingGroup InstancesDistribution.OnDemandBaseCapacity (cfn-lint's
  schema): "An update to this setting means a gradual replacement of instances to adjust the current On-Demand
  Instance levels. When replacing instances, Amazon EC2 Auto Scaling launches new instances before terminating the
  previous ones."
- [instance-refresh]: EC2 Auto Scaling user guide, instance refresh: instances are replaced (terminated, with their
  lifecycle hooks, and launched anew) while the refresh is InProgress.
- [SpotCapacityRebalance]: botocore's ec2 model, ReplacementStrategy: "launch - Spot Fleet launches a new replacement
  Spot Instance when a rebalance notification is emitted for an existing Spot Instance in the fleet. Spot Fleet does
  not terminate the instances that receive a rebalance notification"; "launch-before-terminate - ... and then, after a
  delay that you specify (in TerminationDelay), terminates the instances that received a rebalance notification".
  An Auto Scaling group's CapacityRebalance: "After launching a replacement instance, Amazon EC2 Auto Scaling
  terminates the old instance" (cfn-lint's AWS::AutoScaling::AutoScalingGroup schema, through its lifecycle hook).
- [capacity-blocks]: EC2 user guide (capacity-blocks-using.html, capacity-blocks-monitor.html): EC2 terminates what
  still runs in a Capacity Block 30 minutes before its end, and emits its expiration warning 40 minutes before it
  (scripts/node/capacity-block-end.sh runs the hook then); gpufleet.block_schedule says when the group's scheduled
  actions scale it out and in, and the model runs them as the group would ([PutScheduledUpdateGroupAction]).
- [launch-template-permissions]: EC2 Auto Scaling user guide (ec2-auto-scaling-launch-template-permissions.html):
  "ec2:RunInstances are checked when an Auto Scaling group is created or updated using a launch template"; whether an
  update that names only the distribution is checked too is unknown (community.aws#831 met "You are not authorized to
  use launch template" on UpdateAutoScalingGroup).
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

START = dt.datetime(2026, 11, 23, 6, 0, tzinfo=dt.UTC)
SPOT, ON_DEMAND = "spot", "on-demand"

# Timings, in minutes.
LAUNCH_MINUTES = 2  # pending -> running (unconfirmed: EC2 documents no launch time)
NOTICE_MINUTES = 2  # [spot-interruptions]: "two-minute warning"
SHUTDOWN_MINUTES = 1  # shutting-down -> terminated (unconfirmed)
HOOK_SECONDS = 90  # how long a checkpoint hook runs: the default hook's own wait (scripts/ops/save-checkpoint.sh)
HOOK_MINUTES = 2  # the same, in the whole minutes a lifecycle hook holds a node here
DESCRIBE_LAG_MINUTES = 1  # a new instance is not described yet ([DescribeInstances]: eventual consistency; unconfirmed)
MODIFY_MINUTES = 1  # [ModifySpotFleetRequest]: "While the Spot Fleet request is being modified, it is in the modifying
# state"; how long is (unconfirmed)
HISTORY_LAG = dt.timedelta(seconds=30)  # [DescribeSpotFleetRequestHistory]: "delayed by up to 30 seconds"
FAILURE_EVERY_MINUTES = 5  # how often a fleet or group that cannot launch records it (unconfirmed)
COMMAND_VISIBLE_SECONDS = 10  # GetCommandInvocation answers InvocationDoesNotExist this long after SendCommand
REBALANCE_LEAD_MINUTES = (
    5  # a rebalance recommendation comes this long before EC2 takes the capacity back (the model's)
)
CAPACITY_BLOCK = "capacity-block"  # InstanceLifecycle of a Capacity Block's instances (botocore's ec2 model)
BLOCK_TERMINATION_LEAD_MINUTES = 30  # [capacity-blocks]: EC2 terminates what still runs 30 minutes before the end
BLOCK_WARNING_LEAD_MINUTES = 40  # [capacity-blocks]: the expiration warning, 40 minutes before the end
# Failure texts (the wording is not documented: unconfirmed; the spot one as Auto Scaling users report it).
NO_SPOT = "There is no Spot capacity available that matches your request."
NO_ON_DEMAND = "We currently do not have sufficient capacity in the Availability Zone you requested."


def at(minute: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minute)


class ModelError(Exception):
    """An API error, as botocore parses it: a code and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Unknowns:
    """Behaviours AWS does not document, each with both values; the fallback must be right under each."""

    # A Spot Fleet whose On-Demand portion drops below its live on-demand instances: "keep" them (the fleet is at
    # its target, nothing to do) or "swap" (end the surplus on-demand instances, the newest, with no notice documented
    # for them, whatever the ExcessCapacityTerminationPolicy, and launch spot). gpu-cluster-facts: "Treat that as
    # unknown."
    spot_fleet_on_demand_decrease: str = "keep"
    # UpdateAutoScalingGroup with an InstancesDistribution that names some fields: the others "merge" (stay as they
    # are: "Any properties that you don't specify are not changed", [UpdateAutoScalingGroup], read as reaching into
    # the structure) or take their defaults ("replace": OnDemandPercentageAboveBaseCapacity 100,
    # [InstancesDistribution]).
    distribution_update: str = "merge"
    # DescribeAutoScalingGroups shows SpotInstancePools (2, its default) with any strategy, and an update that sends it
    # with a strategy other than lowest-price is refused ([InstancesDistribution]: "Valid only when the
    # SpotAllocationStrategy is lowest-price"; whether Describe shows it is unconfirmed).
    describes_spot_instance_pools: bool = True
    # The fleet acts between two calls of one run (terminate, then modify, a second apart) rather than only between
    # runs (unconfirmed either way).
    acts_between_calls: bool = False
    # ModifySpotFleetRequest while the request is modifying: "refused" (the model's error code; EC2 documents none) or
    # "accepted" (the later values win). A refused deploy fails and CloudFormation rolls back, which may be refused too.
    modify_while_modifying: str = "refused"
    # How many minutes DescribeSpotFleetInstances lags ("This list is refreshed periodically and might be out of date",
    # [DescribeSpotFleetInstances]): an instance shows this long after its launch and stays this long after its end.
    instance_list_lag: int = 0
    # An Auto Scaling group at MaxSize that replaces instances (a lower on-demand base): "launch-first" beyond MaxSize
    # ([OnDemandBaseCapacity] says launch before terminate, not whether MaxSize bounds it) or "terminate-first", a
    # node ending through its hook before its replacement launches, which may then fail.
    replacement_at_max_size: str = "launch-first"
    # UpdateAutoScalingGroup on a group with a launch template checks ec2:RunInstances and iam:PassRole of the caller
    # ([launch-template-permissions]): True (refused with "You are not authorized to use launch template" without
    # them) or False.
    update_checks_launch_template: bool = False


@dataclass(frozen=True)
class Availability:
    """How many instances of the type EC2 has for this fleet in each market, as steps: (from minute, count); and the
    instances of its Capacity Block, if it has one (the block itself says when they may run)."""

    spot: tuple[tuple[int, int], ...]
    on_demand: tuple[tuple[int, int], ...]
    block: int = 0

    def capacity(self, market: str, minute: int) -> int:
        if market == CAPACITY_BLOCK:
            return self.block
        steps = self.spot if market == SPOT else self.on_demand
        return [count for start, count in steps if start <= minute][-1]


@dataclass
class Instance:
    id: str
    market: str
    launched: int
    state: str = "pending"  # InstanceStateName
    lifecycle: str = "Pending"  # an Auto Scaling group's LifecycleState
    ending_at: float | None = None  # when it goes to shutting-down (after a notice, or a lifecycle hook)
    ended_at: float | None = None  # when it went to shutting-down (a minute, with seconds a run of the fallback spent)
    hook_started_at: float | None = None  # the latest start of its checkpoint hook
    cause: str = ""  # who set its end in motion: "fallback", "deploy", "ec2", "refresh", "group", "rebalance"
    replaces: str = ""  # an Auto Scaling group's replacement: the instance it launched to replace
    ran: bool = False  # it reached running: it may hold work its hook saves
    rebalance_at: int | None = None  # when it got a rebalance recommendation

    @property
    def live(self) -> bool:
        """Pending or running, and not on its way out."""
        return self.state in ("pending", "running") and self.ending_at is None


@dataclass
class Command:
    id: str
    instance_ids: list[str]
    sent: float
    caller: str
    status: dict[str, str] = field(default_factory=dict)  # instance id -> CommandInvocationStatus


class World:
    """The account: instances, the clock, SSM parameters and commands, and who called what."""

    def __init__(self, availability: Availability, unknowns: Unknowns = Unknowns()) -> None:
        self.minute = 0
        # Seconds a run of the fallback has spent in the current minute (its wait for the checkpoint hooks).
        self.seconds = 0.0
        self.availability = availability
        self.unknowns = unknowns
        self.instances: dict[str, Instance] = {}
        self.parameters: dict[str, str] = {}
        self.commands: dict[str, Command] = {}
        self.calls: list[tuple[float, str, str, dict[str, Any]]] = []  # (minute, caller, operation, parameters)
        self.caller = "fallback"
        self._ids = itertools.count(1)
        self.page_size = 2  # items a list operation returns per page, so that every reader pages
        self.fleet: SpotFleet | AutoScalingGroup | None = None
        self.operations: list[tuple[str, str]] = []  # (caller, "service:Operation") of every call, reads included
        # Calls of the fallback to fail, by operation: for each of its next calls, whether it fails (as a call
        # throttled through all its retries fails).
        self.failing: dict[str, list[bool]] = {}
        self.unmanaged: set[str] = set()  # instances SSM does not manage (yet): SendCommand refuses them
        # The actions the caller's role holds beyond those it calls (the fallback's launch-template grants).
        self.granted: set[str] = set()

    def now(self) -> float:
        """The time in minutes, with the seconds a run has spent."""
        return self.minute + self.seconds / 60

    def sleep(self, seconds: float) -> None:
        self.seconds += seconds

    def clock(self) -> float:
        return self.minute * 60 + self.seconds

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):017x}"

    def launch(self, market: str, replaces: str = "") -> Instance | None:
        """A new instance, if the market has one for the fleet now."""
        if self.capacity_left(market) < 1:
            return None
        instance = Instance(self.new_id("i"), market, self.minute, replaces=replaces)
        self.instances[instance.id] = instance
        return instance

    def live(self, market: str | None = None) -> list[Instance]:
        return [i for i in self.instances.values() if i.live and (market is None or i.market == market)]

    def capacity_left(self, market: str) -> int:
        held = [i for i in self.instances.values() if i.market == market and i.state in ("pending", "running")]
        return self.availability.capacity(market, self.minute) - len(held)

    def end(self, instance: Instance, cause: str, after: float = 0) -> None:
        """Set an instance's end in motion: it shuts down `after` minutes from now."""
        if instance.ending_at is None:
            instance.ending_at = self.now() + after
            instance.cause = cause

    def start_hook(self, instance: Instance) -> None:
        instance.hook_started_at = self.now()

    def notify_interruption(self, instance: Instance, cause: str) -> None:
        """[spot-interruptions] and [modify-spot-fleet]: a spot instance EC2 ends gets the two-minute notice, on which
        the spot watcher starts the checkpoint hook."""
        if instance.ending_at is None:
            self.start_hook(instance)
            self.end(instance, cause, NOTICE_MINUTES)

    def advance(self) -> None:
        """One minute of instance life: launches finish, ends happen, the spot market takes back what it lacks."""
        self.seconds = 0.0
        for instance in list(self.instances.values()):
            ending = instance.ending_at is not None and self.minute >= instance.ending_at
            if instance.state in ("pending", "running") and ending:
                # A node whose end comes before its launch is over never ran: nothing of a job is on it.
                instance.state, instance.ended_at = "shutting-down", instance.ending_at
            elif instance.state == "pending" and self.minute - instance.launched >= LAUNCH_MINUTES:
                instance.state, instance.ran = "running", True
            elif instance.state == "shutting-down" and self.minute - (instance.ended_at or 0) >= SHUTDOWN_MINUTES:
                instance.state = "terminated"
        self.recommend_rebalance()
        self.reclaim_spot()

    def recommend_rebalance(self) -> None:
        """[spot-interruptions]: a spot instance at elevated risk gets a rebalance recommendation before its notice;
        here REBALANCE_LEAD_MINUTES before the capacity drop that takes it (the newest go first, as reclaim_spot
        takes them). The spot watcher runs the checkpoint hook on it; a fleet with capacity rebalancing replaces it."""
        staying = [i for i in self.instances.values() if i.market == SPOT and i.live]
        coming = self.availability.capacity(SPOT, self.minute + REBALANCE_LEAD_MINUTES)
        for instance in sorted(staying, key=lambda i: -i.launched)[: max(len(staying) - coming, 0)]:
            if instance.rebalance_at is None:
                instance.rebalance_at = self.minute
                self.start_hook(instance)
                if self.fleet is not None:
                    self.fleet.replace_rebalanced(instance)

    def reclaim_spot(self) -> None:
        """[spot-interruptions]: when EC2 needs the capacity back, spot instances get the notice and end; the newest
        go first (which ones EC2 takes is unconfirmed)."""
        staying = [i for i in self.instances.values() if i.market == SPOT and i.live]
        excess = len(staying) - self.availability.capacity(SPOT, self.minute)
        for instance in sorted(staying, key=lambda i: -i.launched)[: max(excess, 0)]:
            self.notify_interruption(instance, "ec2")

    def record(self, operation: str, parameters: dict[str, Any]) -> None:
        self.calls.append((self.now(), self.caller, operation, parameters))

    # EC2, shared by both backends.

    def DescribeInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        """[DescribeInstances]: by id an unknown id is an error; through the instance-id filter it is left out. An
        instance launched in the last DESCRIBE_LAG_MINUTES is not known yet (eventual consistency)."""
        known = {
            i.id: i
            for i in self.instances.values()
            if self.minute - i.launched >= DESCRIBE_LAG_MINUTES or i.state != "pending"
        }
        if params.get("InstanceIds"):
            missing = [i for i in params["InstanceIds"] if i not in known]
            if missing:
                raise ModelError("InvalidInstanceID.NotFound", f"The instance IDs '{', '.join(missing)}' do not exist")
            wanted = list(params["InstanceIds"])
        else:
            (instance_filter,) = [f for f in params.get("Filters", []) if f["Name"] == "instance-id"]
            wanted = [i for i in instance_filter["Values"] if i in known]
        start = int(params.get("NextToken", 0))
        page = wanted[start : start + self.page_size]
        response: dict[str, Any] = {
            "Reservations": [
                {
                    "ReservationId": f"r-{index:017x}",
                    "Instances": [
                        {
                            "InstanceId": instance_id,
                            "State": {"Name": known[instance_id].state},
                            "LaunchTime": at(known[instance_id].launched),
                            **(
                                {"InstanceLifecycle": known[instance_id].market}
                                if known[instance_id].market in (SPOT, CAPACITY_BLOCK)
                                else {}
                            ),
                        }
                    ],
                }
                for index, instance_id in enumerate(page, start)
            ]
        }
        if start + self.page_size < len(wanted):
            response["NextToken"] = str(start + self.page_size)
        return response

    def TerminateInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        """The caller ends instances at once: no notice ([spot-interruptions] is for EC2's interruptions; an
        on-demand instance has no interruption notice)."""
        self.record("TerminateInstances", params)
        changes = []
        for instance_id in params["InstanceIds"]:
            instance = self.instances.get(instance_id)
            if instance is None:
                raise ModelError("InvalidInstanceID.NotFound", f"The instance ID '{instance_id}' does not exist")
            previous = instance.state
            self.end(instance, self.caller)
            if instance.state in ("pending", "running"):
                instance.state, instance.ended_at = "shutting-down", self.now()
            changes.append(
                {
                    "InstanceId": instance_id,
                    "PreviousState": {"Name": previous},
                    "CurrentState": {"Name": instance.state},
                }
            )
        if self.fleet is not None:
            self.fleet.after_call()
        return {"TerminatingInstances": changes}

    # SSM.

    def GetParameter(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["Name"]
        if name not in self.parameters:
            raise ModelError("ParameterNotFound", f"Parameter {name} not found.")
        return {"Parameter": {"Name": name, "Type": "String", "Value": self.parameters[name], "Version": 1}}

    def PutParameter(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["Name"] in self.parameters and not params.get("Overwrite"):
            raise ModelError("ParameterAlreadyExists", "The parameter already exists.")
        self.parameters[params["Name"]] = params["Value"]
        return {"Version": 1}

    def SendCommand(self, params: dict[str, Any]) -> dict[str, Any]:
        """Run Command on managed, live instances: the checkpoint hook starts on each and runs HOOK_SECONDS. An
        instance SSM does not manage or that is on its way out refuses the whole call with InvalidInstanceId (users'
        reports, gpufleet/ssm_batches.py: which of the two AWS does is unconfirmed; the callers split the batch)."""
        self.record("SendCommand", params)
        instances = [self.instances.get(i) for i in params["InstanceIds"]]
        if any(i is None or i.state not in ("pending", "running") or i.id in self.unmanaged for i in instances):
            raise ModelError("InvalidInstanceId", "Instances not in a valid state for account")
        number = next(self._ids)
        command = Command(
            f"{number:08x}-0000-4000-8000-{number:012x}",
            list(params["InstanceIds"]),
            self.now(),
            self.caller,
            {i: "InProgress" for i in params["InstanceIds"]},
        )
        self.commands[command.id] = command
        for instance in instances:
            assert instance is not None
            self.start_hook(instance)
        return {
            "Command": {
                "CommandId": command.id,
                "InstanceIds": command.instance_ids,
                "DocumentName": params["DocumentName"],
            }
        }

    def GetCommandInvocation(self, params: dict[str, Any]) -> dict[str, Any]:
        """[CommandInvocationStatus]; a command sent in the last COMMAND_VISIBLE_SECONDS is not known yet (the error
        GetCommandInvocation documents, InvocationDoesNotExist); the hook is over HOOK_SECONDS after it started, or
        failed when its instance went first."""
        command = self.commands.get(params["CommandId"])
        node = params["InstanceId"]
        if command is None or node not in command.status or (self.now() - command.sent) * 60 < COMMAND_VISIBLE_SECONDS:
            raise ModelError("InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)")
        if command.status[node] == "InProgress":
            instance = self.instances[node]
            ended = instance.ended_at is not None and instance.ended_at < command.sent + HOOK_SECONDS / 60
            if ended or instance.state not in ("pending", "running"):
                command.status[node] = "Failed"
            elif (self.now() - command.sent) * 60 >= HOOK_SECONDS:
                command.status[node] = "Success"
        return {"CommandId": command.id, "InstanceId": node, "Status": command.status[node]}

    def answer(self, service: str, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        self.operations.append((self.caller, f"{service}:{operation}"))
        if self.caller == "fallback" and self.failing.get(operation) and self.failing[operation].pop(0):
            self.record(f"{operation} (failed)", params)
            raise ModelError("ThrottlingException", f"Rate exceeded ({operation}, through every retry)")
        for owner in (self.fleet, self):
            handler = getattr(owner, operation, None)
            if handler is not None:
                return handler(params)
        raise AssertionError(f"the model does not answer {operation}")


def paged(items: list[Any], params: dict[str, Any], size: int, key: str) -> dict[str, Any]:
    start = int(params.get("NextToken", 0))
    response: dict[str, Any] = {key: items[start : start + size]}
    if start + size < len(items):
        response["NextToken"] = str(start + size)
    return response


class SpotFleet:
    """A Spot Fleet request of type maintain with an on-demand portion, and capacity rebalancing as the template sets
    it ("" off, "launch" or "launch-before-terminate" with a TerminationDelay of rebalance_delay minutes)."""

    def __init__(
        self, world: World, *, target: int, on_demand: int, rebalance: str = "", rebalance_delay: int = 5
    ) -> None:
        self.world = world
        world.fleet = self
        self.id = "sfr-11111111-2222-3333-4444-555555555555"
        self.target, self.on_demand = target, on_demand
        self.state = "active"
        self.modified_at: int | None = None
        self.modified_by = "deploy"  # who changed the request last: the cause of what the change sets in motion
        self.excess_policy = "default"
        self.rebalance_strategy, self.rebalance_delay = rebalance, rebalance_delay
        self.members: list[str] = []
        # Instances listed whatever their state: the list "is refreshed periodically and might be out of date".
        self.listed_anyway: set[str] = set()
        self.history: list[dict[str, Any]] = []
        self.refused: list[tuple[int, str]] = []  # (minute, caller) of each modification refused while modifying
        self._last_failure = {SPOT: -FAILURE_EVERY_MINUTES, ON_DEMAND: -FAILURE_EVERY_MINUTES}

    def instances(self) -> list[Instance]:
        return [self.world.instances[i] for i in self.members]

    def live(self, market: str | None = None) -> list[Instance]:
        return [i for i in self.instances() if i.live and (market is None or i.market == market)]

    def event(self, event_type: str, subtype: str, description: str = "", instance_id: str = "") -> None:
        information: dict[str, Any] = {"EventSubType": subtype}
        if description:
            information["EventDescription"] = description
        if instance_id:
            information["InstanceId"] = instance_id
        self.history.append(
            {"Timestamp": at(self.world.minute), "EventType": event_type, "EventInformation": information}
        )

    def step(self) -> None:
        """The fleet's minute: a modification completes, rebalanced instances reach their delay, then the fleet
        reconciles."""
        if self.state == "modifying" and self.world.minute - (self.modified_at or 0) >= MODIFY_MINUTES:
            self.state = "active"
            self.event("fleetRequestChange", "modify_succeeded")
        if self.rebalance_strategy == "launch-before-terminate":
            for instance in self.live(SPOT):
                if (
                    instance.rebalance_at is not None
                    and self.world.minute - instance.rebalance_at >= self.rebalance_delay
                ):
                    self.world.notify_interruption(instance, "rebalance")
        self.reconcile()

    def after_call(self) -> None:
        if self.world.unknowns.acts_between_calls:
            self.reconcile()

    def replace_rebalanced(self, instance: Instance) -> None:
        """[SpotCapacityRebalance]: a replacement spot instance for one that got a rebalance recommendation."""
        if self.rebalance_strategy and instance.id in self.members and self.state in ("active", "modifying"):
            self._launch(SPOT)

    def reconcile(self) -> None:
        if self.state not in ("active", "modifying"):
            return
        self.scale_in()
        self.on_demand_surplus()
        self.fill()

    def counted(self, market: str | None = None) -> list[Instance]:
        """The live instances the fleet counts toward its target: with capacity rebalancing, not one that a
        replacement was launched for (unconfirmed: how EC2 counts them)."""
        return [i for i in self.live(market) if not (self.rebalance_strategy and i.rebalance_at is not None)]

    def scale_in(self) -> None:
        """[modify-spot-fleet]: above the target, with ExcessCapacityTerminationPolicy default, the fleet terminates
        Spot Instances, each with an interruption notice, until it is at the target (noTermination: it keeps them)."""
        excess = len(self.counted()) - self.target
        if excess <= 0 or self.excess_policy != "default":
            return
        for instance in sorted(self.counted(SPOT), key=lambda i: -i.launched)[:excess]:
            self.world.notify_interruption(instance, self.modified_by)
            self.event("instanceChange", "termination_notified", instance_id=instance.id)

    def on_demand_surplus(self) -> None:
        """More live on-demand instances than the On-Demand portion, the fleet at its target: Unknowns."""
        surplus = len(self.live(ON_DEMAND)) - self.on_demand
        if surplus <= 0 or self.world.unknowns.spot_fleet_on_demand_decrease != "swap":
            return
        for instance in sorted(self.live(ON_DEMAND), key=lambda i: -i.launched)[:surplus]:
            self.world.end(instance, self.modified_by)
            self.event("instanceChange", "terminated", instance_id=instance.id)

    def fill(self) -> None:
        """[maintain] and [modify-spot-fleet]: the fleet launches on-demand instances up to its On-Demand portion and
        spot instances for the rest of its target; a market without capacity records a failure in the history
        ([EventInformation] allLaunchSpecsTemporarilyBlacklisted for spot, as the spot failure the fallback reads;
        what EC2 records for an on-demand shortage is unconfirmed, so nothing)."""
        for _ in range(self.on_demand - len(self.live(ON_DEMAND))):
            if not self._launch(ON_DEMAND):
                break
        wanted = min(self.target - self.on_demand - len(self.counted(SPOT)), self.target - len(self.counted()))
        for _ in range(max(wanted, 0)):
            if not self._launch(SPOT):
                if self.world.minute - self._last_failure[SPOT] >= FAILURE_EVERY_MINUTES:
                    self._last_failure[SPOT] = self.world.minute
                    self.event("error", "allLaunchSpecsTemporarilyBlacklisted", NO_SPOT)
                break

    def _launch(self, market: str) -> bool:
        instance = self.world.launch(market)
        if instance is None:
            return False
        self.members.append(instance.id)
        self.event("instanceChange", "launched", instance_id=instance.id)
        return True

    def redeploy(self, target: int, on_demand: int) -> None:
        """A CloudFormation update writes the template's values back with ModifySpotFleetRequest (TargetCapacity and
        OnDemandTargetCapacity update in place: gpu-cluster-facts, the resource schema's update handler), with the
        template's ExcessCapacityTerminationPolicy (default, stacks/constructs/gpu_spot_fleet.py; that it sends the
        unchanged values is unconfirmed)."""
        self.ModifySpotFleetRequest(
            {
                "SpotFleetRequestId": self.id,
                "TargetCapacity": target,
                "OnDemandTargetCapacity": on_demand,
                "ExcessCapacityTerminationPolicy": "default",
            }
        )

    # The API.

    def DescribeSpotFleetRequests(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["SpotFleetRequestIds"] != [self.id]:
            raise ModelError("InvalidSpotFleetRequestId.NotFound", "The Spot Fleet request ID does not exist")
        config = {
            "IamFleetRole": "arn:aws:iam::123456789012:role/fleet",
            "TargetCapacity": self.target,
            "OnDemandTargetCapacity": self.on_demand,
            "Type": "maintain",
            "ExcessCapacityTerminationPolicy": self.excess_policy,
        }
        return {
            "SpotFleetRequestConfigs": [
                {
                    "SpotFleetRequestId": self.id,
                    "SpotFleetRequestState": self.state,
                    "CreateTime": START,
                    "SpotFleetRequestConfig": config,
                }
            ]
        }

    def DescribeSpotFleetInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        """[DescribeSpotFleetInstances]: the running instances (pending ones too: unconfirmed), a spot one with its
        request id, as of Unknowns.instance_list_lag minutes ago."""
        lag = self.world.unknowns.instance_list_lag
        active = [
            {
                "InstanceId": i.id,
                "InstanceType": "p4d.24xlarge",
                **({"SpotInstanceRequestId": f"sir-{i.id[2:10]}"} if i.market == SPOT else {}),
            }
            for i in self.instances()
            if self.world.minute - i.launched >= lag
            and (
                i.state in ("pending", "running")
                or i.id in self.listed_anyway
                or (i.ended_at is not None and self.world.minute - i.ended_at < lag)
            )
        ]
        return {"SpotFleetRequestId": self.id, **paged(active, params, self.world.page_size, "ActiveInstances")}

    def DescribeSpotFleetRequestHistory(self, params: dict[str, Any]) -> dict[str, Any]:
        """[DescribeSpotFleetRequestHistory]: the records from StartTime up to LastEvaluatedTime, which lags the
        clock by up to 30 seconds and is "not present" while NextToken says there are more."""
        read_until = at(self.world.minute) - HISTORY_LAG
        records = [r for r in self.history if params["StartTime"] <= r["Timestamp"] <= read_until]
        page = paged(records, params, self.world.page_size, "HistoryRecords")
        return {
            "SpotFleetRequestId": self.id,
            "StartTime": params["StartTime"],
            **({} if "NextToken" in page else {"LastEvaluatedTime": read_until}),
            **page,
        }

    def ModifySpotFleetRequest(self, params: dict[str, Any]) -> dict[str, Any]:
        """[ModifySpotFleetRequest]: maintain fleets only; the request is modifying until the change is processed;
        TargetCapacity may not be below OnDemandTargetCapacity (jenkinsci/ec2-fleet-plugin#130). A modification while
        one is in progress: Unknowns.modify_while_modifying (EC2 documents no error for it)."""
        self.world.record("ModifySpotFleetRequest", params)
        if self.state == "modifying" and self.world.unknowns.modify_while_modifying == "refused":
            self.refused.append((self.world.minute, self.world.caller))
            raise ModelError("IncorrectState", "The Spot Fleet request is being modified")
        target = params.get("TargetCapacity", self.target)
        on_demand = params.get("OnDemandTargetCapacity", self.on_demand)
        if target < on_demand:
            raise ModelError(
                "InvalidParameter",
                f"TargetCapacity ({target}) cannot be less than OnDemandTargetCapacity ({on_demand}).",
            )
        self.target, self.on_demand = target, on_demand
        self.excess_policy = params.get("ExcessCapacityTerminationPolicy", self.excess_policy)
        self.state, self.modified_at, self.modified_by = "modifying", self.world.minute, self.world.caller
        self.event("fleetRequestChange", "modify_in_progress")
        self.after_call()
        return {"Return": True}


class AutoScalingGroup:
    """An Auto Scaling group with a mixed instances policy (0 % on-demand above the base), a termination lifecycle
    hook, one instance type, MaxSize = the target as the template sets it; with capacity rebalancing when the template
    turns it on. A Capacity Block group (block = (start, end) minutes) has no mixed instances policy: its nodes are the
    block's, and scheduled actions (gpufleet.block_schedule) set its desired capacity."""

    def __init__(
        self,
        world: World,
        *,
        target: int,
        on_demand: int,
        name: str = "gpufleet-probe-nodes",
        rebalance: bool = False,
        block: tuple[int, int] | None = None,
    ) -> None:
        self.world = world
        world.fleet = self
        self.name = name
        self.desired = target
        self.max_size = target
        self.distribution: dict[str, Any] = {
            "OnDemandAllocationStrategy": "lowest-price",
            "OnDemandBaseCapacity": on_demand,
            "OnDemandPercentageAboveBaseCapacity": 0,
            "SpotAllocationStrategy": "price-capacity-optimized",
        }
        self.rebalance_on = rebalance
        self.block = block
        self.scheduled: list[tuple[int, int]] = []  # (minute, desired capacity) of the scheduled actions still ahead
        if block is not None:
            self._schedule(target, *block)
        self.status = ""
        self.members: list[str] = []
        self.activities: list[dict[str, Any]] = []
        self.refreshes: list[dict[str, Any]] = []
        self._last_failure = {SPOT: -FAILURE_EVERY_MINUTES, ON_DEMAND: -FAILURE_EVERY_MINUTES, CAPACITY_BLOCK: -99}

    def _schedule(self, target: int, start: int, end: int) -> None:
        """The template's DesiredCapacity and scheduled actions as gpufleet.block_schedule makes them at minute 0."""
        from gpufleet.block_schedule import block_schedule

        schedule = block_schedule(start=at(start), end=at(end), target=target, now=at(0))
        self.desired = schedule.desired_capacity
        self.scheduled = [
            (round((action.at - START).total_seconds() / 60), action.desired_capacity) for action in schedule.actions
        ]

    def instances(self) -> list[Instance]:
        return [self.world.instances[i] for i in self.members]

    def live(self, market: str | None = None) -> list[Instance]:
        return [i for i in self.instances() if i.live and (market is None or i.market == market)]

    def wanted(self) -> dict[str, int]:
        """[InstancesDistribution]: the base is on-demand, the percentage of the rest above it too."""
        if self.block is not None:
            return {CAPACITY_BLOCK: self.desired, ON_DEMAND: 0, SPOT: 0}
        base = min(self.distribution["OnDemandBaseCapacity"], self.desired)
        above = self.desired - base
        on_demand = base + round(above * self.distribution["OnDemandPercentageAboveBaseCapacity"] / 100)
        return {ON_DEMAND: on_demand, SPOT: self.desired - on_demand, CAPACITY_BLOCK: 0}

    def step(self) -> None:
        for minute, desired in list(self.scheduled):
            if minute <= self.world.minute:
                self.scheduled.remove((minute, desired))
                self.desired = desired
        self.capacity_block_end()
        self.lifecycle()
        self.refresh()
        if not self.status:
            self.reconcile()

    def capacity_block_end(self) -> None:
        """[capacity-blocks]: the expiration warning runs the hook on every node still in the block
        (capacity-block-end.sh), and EC2 terminates them ten minutes later."""
        if self.block is None:
            return
        end = self.block[1]
        for instance in self.live(CAPACITY_BLOCK):
            if self.world.minute == end - BLOCK_WARNING_LEAD_MINUTES:
                self.world.start_hook(instance)
            if self.world.minute >= end - BLOCK_TERMINATION_LEAD_MINUTES:
                self.world.end(instance, "ec2")

    def after_call(self) -> None:
        """An Auto Scaling group acts on its own schedule (the model's minute), not between two calls."""

    def replace_rebalanced(self, instance: Instance) -> None:
        """[SpotCapacityRebalance]: a group with capacity rebalancing launches a replacement for an instance that got
        a rebalance recommendation, and terminates the old one (through its hook) once the new one runs."""
        if self.rebalance_on and instance.id in self.members and not self.status:
            self._launch(SPOT, replaces=instance.id)

    def lifecycle(self) -> None:
        """[lifecycle-hooks]: a terminating instance waits in Terminating:Wait while the watcher runs the hook, then
        goes on; a spot interruption ends the instance after its notice whatever the hook does ([spot-interruptions]).
        """
        for instance in self.instances():
            if instance.state == "running" and instance.lifecycle == "Pending":
                instance.lifecycle = "InService"
            if instance.ending_at is not None and instance.lifecycle not in ("Terminating:Proceed", "Terminated"):
                instance.lifecycle = "Terminating:Wait"
            if instance.state in ("shutting-down", "terminated"):
                instance.lifecycle = "Terminated" if instance.state == "terminated" else "Terminating:Proceed"

    def terminate(self, instance: Instance, cause: str) -> None:
        """[lifecycle-hooks]: the group's own terminations wait for the hook (HOOK_MINUTES here)."""
        self.world.start_hook(instance)
        instance.lifecycle = "Terminating:Wait"
        self.world.end(instance, cause, HOOK_MINUTES)
        self.activity("Successful", f"Terminating EC2 instance: {instance.id}")

    def activity(self, status: str, description: str, message: str = "") -> None:
        record: dict[str, Any] = {
            "ActivityId": self.world.new_id("act"),
            "AutoScalingGroupName": self.name,
            "Cause": f"At {at(self.world.minute).isoformat()} a difference between desired and actual capacity.",
            "Description": description,
            "StartTime": at(self.world.minute),
            "EndTime": at(self.world.minute),
            "StatusCode": status,
            "Progress": 100,
        }
        if message:
            record["StatusMessage"] = message
        self.activities.append(record)

    def _launch(self, market: str, replaces: str = "") -> bool:
        if self.block is not None and not self._block_open():
            instance = None
        else:
            instance = self.world.launch(market, replaces)
        if instance is None:
            if self.world.minute - self._last_failure[market] >= FAILURE_EVERY_MINUTES:
                self._last_failure[market] = self.world.minute
                kind = {SPOT: "Spot", ON_DEMAND: "On-Demand", CAPACITY_BLOCK: "Capacity Block"}[market]
                text = NO_SPOT if market == SPOT else NO_ON_DEMAND
                self.activity(
                    "Failed",
                    f"Launching a new EC2 instance.  Status Reason: Could not launch {kind} Instances. "
                    f"InsufficientInstanceCapacity - {text}",
                    f"Could not launch {kind} Instances. InsufficientInstanceCapacity - {text} Launching EC2 "
                    "instance failed.",
                )
            return False
        self.members.append(instance.id)
        self.activity("Successful", f"Launching a new EC2 instance: {instance.id}")
        return True

    def _block_open(self) -> bool:
        """[capacity-blocks]: the block takes instances from its start until EC2 begins terminating them."""
        assert self.block is not None
        start, end = self.block
        return start <= self.world.minute < end - BLOCK_TERMINATION_LEAD_MINUTES

    def reconcile(self) -> None:
        """The group keeps DesiredCapacity with the distribution's markets. It fills each market's gap (a market
        without capacity records a Failed activity; the group does not launch the other market instead). When the
        mix is off with the group full, it replaces instances, launching each new one first and terminating the old
        one once the new one is in service ([OnDemandBaseCapacity]; [UpdateAutoScalingGroup]: "launches new instances
        before terminating the old ones"); at MaxSize, Unknowns.replacement_at_max_size (a group that keeps to it waits
        for a replacement under way before it starts the next); how many at a time is (unconfirmed): all MaxSize allows
        here. Above the desired capacity it terminates (its termination policy
        decides which: the newest here, unconfirmed)."""
        wanted = self.wanted()
        being_replaced = set()
        for new in self.live():
            if not new.replaces:
                continue
            old = self.world.instances[new.replaces]
            if not old.live:
                new.replaces = ""
            elif new.state == "running":
                self.terminate(old, "rebalance" if old.rebalance_at is not None else "group")
                new.replaces = ""
            else:
                being_replaced.add(old.id)
        counted = [i for i in self.live() if i.id not in being_replaced]
        for instance in sorted(counted, key=lambda i: -i.launched)[: max(len(counted) - self.desired, 0)]:
            self.terminate(instance, "group")
        counted = [i for i in self.live() if i.id not in being_replaced]
        markets = (ON_DEMAND, SPOT, CAPACITY_BLOCK)
        have = {market: len([i for i in counted if i.market == market]) for market in markets}
        gap = self.desired - len(counted) - len(self._refreshing())
        for market in markets:
            for _ in range(max(min(wanted[market] - have[market], gap), 0)):
                if not self._launch(market):
                    break
                have[market] += 1
                gap -= 1
        for market, other in ((ON_DEMAND, SPOT), (SPOT, ON_DEMAND)):
            surplus = [i for i in counted if i.market == other and not i.replaces]
            surplus = sorted(surplus, key=lambda i: -i.launched)[: max(have[other] - wanted[other], 0)]
            for old in surplus[: max(wanted[market] - have[market], 0)]:
                if len(self.live()) >= self.max_size and self.world.unknowns.replacement_at_max_size != "launch-first":
                    if being_replaced or any(i.replaces for i in self.live()):
                        break  # a replacement launched within MaxSize is under way: the next one waits for it
                    # Terminate first: the old node ends through its hook; its replacement is launched once it is
                    # gone (the gap the next reconcile fills, if the market has room).
                    self.terminate(old, "group")
                    break
                if not self._launch(market, replaces=old.id):
                    break

    def _refreshing(self) -> list[Instance]:
        """Instances an instance refresh is terminating: each keeps its place until it is gone."""
        return [i for i in self.instances() if i.cause == "refresh" and i.state != "terminated"]

    def refresh(self) -> None:
        """[instance-refresh]: with the default instance maintenance policy (MinHealthyPercentage 90,
        MaxHealthyPercentage 100) the refresh terminates an instance (through its lifecycle hook) before the group
        launches its replacement, and goes on to the next once the group is whole and in service again; here one at
        a time (the batch size follows the percentages: unconfirmed). Successful once every instance is newer than
        its start."""
        for refresh in self.refreshes:
            if refresh["Status"] != "InProgress":
                continue
            started = refresh["_started"]
            old = [i for i in self.live() if i.launched < started]
            if not old and not self._refreshing():
                refresh["Status"], refresh["EndTime"] = "Successful", at(self.world.minute)
                continue
            whole = len(self.live()) >= self.desired and all(i.state == "running" for i in self.live())
            if old and whole and not self._refreshing():
                self.terminate(old[0], "refresh")

    def start_refresh(self) -> None:
        self.refreshes.append(
            {
                "InstanceRefreshId": self.world.new_id("refresh"),
                "AutoScalingGroupName": self.name,
                "Status": "InProgress",
                "StartTime": at(self.world.minute),
                "_started": self.world.minute,
            }
        )

    def redeploy(self, target: int, on_demand: int) -> None:
        """A CloudFormation update sends the template's sizes and whole mixed instances policy (the resource's update
        handler calls UpdateAutoScalingGroup with the model it is given: unconfirmed that it sends unchanged
        properties). The template has MinSize 0, MaxSize = target and no DesiredCapacity: the group capacity custom
        resource sets that, and a redeploy leaves it alone (stacks/constructs/gpu_auto_scaling_group.py)."""
        self.UpdateAutoScalingGroup(
            {
                "AutoScalingGroupName": self.name,
                "MinSize": 0,
                "MaxSize": target,
                "MixedInstancesPolicy": {
                    "InstancesDistribution": {
                        "OnDemandAllocationStrategy": "lowest-price",
                        "OnDemandBaseCapacity": on_demand,
                        "OnDemandPercentageAboveBaseCapacity": 0,
                        "SpotAllocationStrategy": "price-capacity-optimized",
                    }
                },
            }
        )

    def delete(self) -> None:
        """[AutoScalingGroup.Status] while the deletion runs; "its desired, minimum, and maximum values are set to 0"
        (EC2 Auto Scaling user guide, as-process-shutdown)."""
        self.status, self.desired = "Delete in progress", 0
        for instance in self.live():
            self.terminate(instance, "deploy")

    # The API.

    def DescribeAutoScalingGroups(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["AutoScalingGroupNames"] != [self.name]:
            return {"AutoScalingGroups": []}
        distribution = dict(self.distribution)
        if self.world.unknowns.describes_spot_instance_pools:
            distribution.setdefault("SpotInstancePools", 2)
        template = {"LaunchTemplateId": "lt-0123456789abcdef0", "Version": "1"}
        group: dict[str, Any] = {
            "AutoScalingGroupName": self.name,
            "MinSize": 0,
            "MaxSize": self.max_size,
            "DesiredCapacity": self.desired,
            "DefaultCooldown": 300,
            "AvailabilityZones": ["us-east-1a"],
            "HealthCheckType": "EC2",
            "CreatedTime": START,
            "CapacityRebalance": self.rebalance_on,
            **(
                {"LaunchTemplate": template}
                if self.block is not None
                else {
                    "MixedInstancesPolicy": {
                        "LaunchTemplate": {
                            "LaunchTemplateSpecification": template,
                            "Overrides": [{"InstanceType": "p4d.24xlarge"}],
                        },
                        "InstancesDistribution": distribution,
                    }
                }
            ),
            "Instances": [
                {
                    "InstanceId": i.id,
                    "AvailabilityZone": "us-east-1a",
                    "LifecycleState": i.lifecycle,
                    "HealthStatus": "Healthy",
                    "ProtectedFromScaleIn": False,
                }
                for i in self.instances()
                if i.state != "terminated"
            ],
        }
        if self.status:
            group["Status"] = self.status
        return {"AutoScalingGroups": [group]}

    def DescribeInstanceRefreshes(self, params: dict[str, Any]) -> dict[str, Any]:
        shown = [{k: v for k, v in r.items() if not k.startswith("_")} for r in reversed(self.refreshes)]
        return paged(shown, params, self.world.page_size, "InstanceRefreshes")

    def DescribeScalingActivities(self, params: dict[str, Any]) -> dict[str, Any]:
        """[DescribeScalingActivities]: newest first, at most MaxRecords (100 at most) a page; StartTimeLowerBound
        leaves out activities that started earlier, and takes an ISO 8601 time in the forms its documentation shows
        ("2000-01-18T08:15:00Z", "2000-01-18T16:15:00+08:00"; whether AWS takes others, a fraction of a second among
        them, is not documented: the model refuses them)."""
        assert params.get("MaxRecords", 100) <= 100
        lower = [f for f in params.get("Filters", []) if f["Name"] == "StartTimeLowerBound"]
        activities = list(reversed(self.activities))
        if lower:
            value = lower[0]["Values"][0]
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})", value):
                raise ModelError("ValidationError", f"StartTimeLowerBound {value!r} is not a documented time form")
            bound = dt.datetime.fromisoformat(value)
            activities = [a for a in activities if a["StartTime"] >= bound]
        return paged(activities, params, min(params.get("MaxRecords", 100), self.world.page_size), "Activities")

    def UpdateAutoScalingGroup(self, params: dict[str, Any]) -> dict[str, Any]:
        """[UpdateAutoScalingGroup] with [InstancesDistribution]: see Unknowns for the fields it does not name, for
        SpotInstancePools and for the launch template permissions it may check."""
        self.world.record("UpdateAutoScalingGroup", params)
        if self.status:
            raise ModelError("ScalingActivityInProgress", f"The group is {self.status}")
        if (
            self.world.unknowns.update_checks_launch_template
            and self.world.caller == "fallback"
            and not {"ec2:RunInstances", "iam:PassRole"} <= self.world.granted
        ):
            raise ModelError("AccessDenied", "You are not authorized to use launch template: lt-0123456789abcdef0")
        sent = params.get("MixedInstancesPolicy", {}).get("InstancesDistribution")
        if sent is not None:
            strategy = sent.get("SpotAllocationStrategy", self.distribution["SpotAllocationStrategy"])
            if "SpotInstancePools" in sent and strategy != "lowest-price":
                raise ModelError(
                    "ValidationError", "SpotInstancePools is valid only when the SpotAllocationStrategy is lowest-price"
                )
            if self.world.unknowns.distribution_update == "replace":
                self.distribution = {
                    "OnDemandAllocationStrategy": "prioritized",
                    "OnDemandBaseCapacity": 0,
                    "OnDemandPercentageAboveBaseCapacity": 100,
                    "SpotAllocationStrategy": "lowest-price",
                }
            self.distribution.update({k: v for k, v in sent.items() if k != "SpotInstancePools"})
        if "DesiredCapacity" in params:
            self.desired = params["DesiredCapacity"]
        if "MaxSize" in params:
            self.max_size = params["MaxSize"]
        return {}
