"""The part of gpufleet the capacity fallback Lambda runs: fallback.py and constants.py are links to
gpufleet/fallback.py and gpufleet/constants.py, copied into the Lambda asset (../../infrastructure.py follows the
links), so the decision and the vocabulary have one source each."""
