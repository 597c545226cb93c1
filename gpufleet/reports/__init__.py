"""Parsers for what GPU nodes print (nccl-tests logs, ``nvidia-smi topo -m``): pure functions over text."""
