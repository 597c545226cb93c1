"""The part of gpufleet the cluster user key Lambda runs: aws_faults.py is a link to gpufleet/aws_faults.py, copied
into the Lambda asset (stacks/constructs/lambda_functions.py runtime_code follows the link), so the rule for AWS calls
has one source."""
