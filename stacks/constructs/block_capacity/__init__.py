"""The Capacity Block group's schedule: the construct (infrastructure.py) and the Lambda code it deploys (runtime/)."""
