"""Every node hears an interruption: the construct (infrastructure.py) and the Lambda code it deploys (runtime/)."""
