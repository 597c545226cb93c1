"""The block capacity Lambda's asset (handler.py: on_event of the custom resource)."""
