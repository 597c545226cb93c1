"""The part of gpufleet the interruption fan-out Lambda runs: aws_faults.py, checkpoint_hook.py, constants.py and
ssm_batches.py are links to gpufleet's own files, copied into the Lambda asset (stacks/constructs/lambda_functions.py
runtime_code follows the links)."""
