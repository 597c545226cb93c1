"""The part of gpufleet the capacity fallback Lambda runs: fallback.py, constants.py, aws_faults.py, checkpoint_hook.py
and ssm_batches.py are links to gpufleet's own files, copied into the Lambda asset
(stacks/constructs/lambda_functions.py runtime_code follows the links), so the decision, the vocabulary, the rule for
AWS calls, the checkpoint hook's command and the way Run Command is sent have one source each."""
