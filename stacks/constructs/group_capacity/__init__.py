"""The group capacity: the construct (infrastructure.py) and the Lambda code it deploys (runtime/)."""
