"""Kubernetes manifests for environments with flavour: eks (the MPIJobs `gpufleet k8s` writes)."""
