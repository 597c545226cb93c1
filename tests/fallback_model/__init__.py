"""A discrete-time model of a Spot Fleet and an Auto Scaling group, written from AWS's documentation, that answers the
capacity fallback's API calls through botocore (issue 19, Build 1)."""
