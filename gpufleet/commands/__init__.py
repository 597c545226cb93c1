"""Sub-commands of ``gpufleet``; each module has ``register(subparsers)``."""
