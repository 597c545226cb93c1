"""The group capacity Lambda's asset (handler.py: on_event and is_complete of the custom resource)."""
