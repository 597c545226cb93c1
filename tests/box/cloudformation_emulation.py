"""CloudFormation's termination protection as the box's emulator answers for it. Imported by the emulator's server
process (tests/box/aws_server.py), where moto's backends live.

moto 5.2.5 keeps a stack's EnableTerminationProtection from CreateStack but has no UpdateTerminationProtection, and
deletes a protected stack. Added here, from the CloudFormation user guide (using-cfn-protect-stacks.html: "If a user
attempts to delete a stack with termination protection enabled, the deletion fails and the stack, including its
status, remains unchanged") and botocore's cloudformation model (UpdateTerminationProtection: StackName,
EnableTerminationProtection; answers StackId):
- UpdateTerminationProtection sets it;
- DeleteStack of a protected stack fails with ValidationError (the message's wording is unconfirmed).
"""

from __future__ import annotations

from typing import Any

from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.responses import CloudFormationResponse
from moto.core.responses import ActionResult


def _update_termination_protection(self: CloudFormationResponse) -> ActionResult:
    stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
    stack.enable_termination_protection = self._get_param("EnableTerminationProtection") in (True, "true")
    return ActionResult({"StackId": stack.stack_id})


_delete_stack = CloudFormationResponse.delete_stack


def _delete_unless_protected(self: CloudFormationResponse) -> Any:
    name = self._get_param("StackName")
    stacks = [stack for stack in self.cloudformation_backend.stacks.values() if name in (stack.name, stack.stack_id)]
    if any(stack.enable_termination_protection for stack in stacks):
        raise ValidationError(
            message=f"Stack [{name}] cannot be deleted while TerminationProtection is enabled",
        )
    return _delete_stack(self)


def install() -> None:
    CloudFormationResponse.update_termination_protection = _update_termination_protection  # type: ignore[attr-defined]
    CloudFormationResponse.delete_stack = _delete_unless_protected  # type: ignore[method-assign]
