"""Constructs the cluster stacks compose."""
