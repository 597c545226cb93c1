"""The capacity fallback Lambda's asset (handler.py and the decision it imports as gpufleet.fallback)."""
