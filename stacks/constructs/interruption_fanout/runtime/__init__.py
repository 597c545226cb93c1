"""The interruption fan-out Lambda's asset (handler.py and the part of gpufleet it imports)."""
