"""The part of gpufleet the capacity fallback Lambda runs: fallback.py is a link to gpufleet/fallback.py, copied into
the Lambda asset (stacks/constructs/capacity_fallback.py follows the link), so the decision has one source."""
