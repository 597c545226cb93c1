"""The capacity fallback Lambda's asset (handler.py, state_cleanup.py and the part of gpufleet they import)."""
