"""The cluster user: its key secret, the custom resource that fills it (infrastructure.py, runtime/), and the Session
Manager document that opens a shell as it."""
