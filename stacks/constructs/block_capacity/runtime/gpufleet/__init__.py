"""The part of gpufleet the block capacity Lambda runs: block_schedule.py, constants.py and aws_faults.py are links to
gpufleet's own files, copied into the Lambda asset (stacks/constructs/lambda_functions.py runtime_code follows the
links), so the schedule, the vocabulary and the rule for AWS calls have one source each."""
