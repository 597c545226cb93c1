"""CDK stacks and constructs of a gpufleet environment."""
