"""The commands that work on one flavour only, and the one check that refuses an environment of the other flavour.

The fleet flavour's operator commands find their nodes through the stack gpufleet-ENV-cluster and reach them with
Run Command; an eks environment has neither (its nodes are an EKS cluster's, its jobs MPIJobs). The `gpufleet k8s`
commands write MPIJobs for an eks environment's cluster, which a fleet environment does not have. Each refusal names
the command and what to use instead on the environment's own flavour, and exits 2 (bad input) before anything asks
AWS.
"""

from __future__ import annotations

from typing import NamedTuple

from gpufleet.constants import FLAVOUR_EKS, FLAVOUR_FLEET
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.loading import load_named_environment

WRONG_FLAVOUR_EXIT = 2


class FlavourOnly(NamedTuple):
    flavour: str  # the flavour the command works on
    instead: str  # what to use on the other flavour; ENV stands for the environment's name


FLAVOUR_ONLY_COMMANDS = {
    "up": FlavourOnly(FLAVOUR_FLEET, "`npx cdk deploy -c env=ENV --all` and `gpufleet status ENV`"),
    "down": FlavourOnly(
        FLAVOUR_FLEET, "`npx cdk destroy -c env=ENV --all`, then the storage as docs/guides/storage.md says"
    ),
    "rehearse": FlavourOnly(
        FLAVOUR_FLEET, "an AWS FIS experiment of your own (action aws:ec2:send-spot-instance-interruptions)"
    ),
    "hosts": FlavourOnly(FLAVOUR_FLEET, "`kubectl get nodes -o wide` (the MPI operator gives an MPIJob its hosts)"),
    "run": FlavourOnly(FLAVOUR_FLEET, "an MPIJob with `kubectl apply -f` (`gpufleet k8s nccl-test ENV` writes one)"),
    "runs": FlavourOnly(FLAVOUR_FLEET, "`kubectl get mpijobs`"),
    "stop": FlavourOnly(FLAVOUR_FLEET, "`kubectl delete mpijob NAME`"),
    "logs": FlavourOnly(FLAVOUR_FLEET, "`kubectl logs job/NAME-launcher`"),
    "acceptance": FlavourOnly(
        FLAVOUR_FLEET,
        "`gpufleet status ENV --nodes FILE`, `gpufleet k8s efa-info ENV` and `gpufleet k8s nccl-test ENV`",
    ),
    "k8s efa-info": FlavourOnly(FLAVOUR_EKS, "`gpufleet acceptance ENV` (fi_info -p efa on every node)"),
    "k8s nccl-test": FlavourOnly(
        FLAVOUR_EKS, "`gpufleet acceptance ENV` (nccl-tests all_reduce across the ready nodes)"
    ),
}

# What a command of each flavour needs that an environment of the other flavour does not have.
NEEDS = {
    FLAVOUR_FLEET: "the fleet flavour's nodes (stack {stack_prefix}-cluster, reached through Run Command)",
    FLAVOUR_EKS: "the eks flavour's Kubernetes cluster and its MPI operator",
}
# Where the environment's own flavour is operated, for the command the refusal names instead.
GUIDES = {FLAVOUR_FLEET: "docs/guides/acceptance.md", FLAVOUR_EKS: "docs/guides/eks.md"}


def load_environment_for(command: str, name: str) -> Environment:
    """The environment NAME, refused with one line (exit 2) when COMMAND (a key of FLAVOUR_ONLY_COMMANDS) works
    only on the other flavour."""
    environment = load_named_environment(name)
    only = FLAVOUR_ONLY_COMMANDS[command]
    if environment.flavour != only.flavour:
        needs = NEEDS[only.flavour].format(stack_prefix=environment.stack_prefix)
        raise GpufleetError(
            f"gpufleet {command} {name}: {name} has flavour: {environment.flavour}, and `gpufleet {command}` needs "
            f"{needs}: on {environment.flavour}, use {only.instead.replace('ENV', name)} "
            f"(see {GUIDES[environment.flavour]})",
            exit_code=WRONG_FLAVOUR_EXIT,
        )
    return environment
