"""The part of gpufleet the fleet teardown Lambda runs: aws_faults.py and checkpoint_hook.py are links to gpufleet's
own files, copied into the Lambda asset (stacks/constructs/lambda_functions.py runtime_code follows the links), so the
rules for AWS calls and for the checkpoint hook have one source each."""
