"""gpufleet: EFA GPU training clusters on AWS, their images and the tools to operate them."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
