"""The part of gpufleet the fleet teardown Lambda runs: aws_faults.py, checkpoint_hook.py and ssm_batches.py are links
to gpufleet's own files, copied into the Lambda asset (stacks/constructs/lambda_functions.py runtime_code follows the
links), so the rules for AWS calls, for the checkpoint hook and for sending Run Command have one source each."""
