"""The schemas every manifest `gpufleet k8s` writes is checked against, offline.

- The MPIJob: the MPI operator v0.8.0 CRD's openAPIV3Schema (the copy the cluster gets, in
  stacks/constructs/mpi_operator_chart/crds/), with unknown properties refused wherever it names an object's
  properties and says nothing about others (the API server would drop an unknown field of a structural schema
  instead, unless the client asks for strict field validation), so a misspelt field fails here.
- Each pod template in it: kubernetes-validate's strict schemas (unknown properties refused) of the Kubernetes version
  gpufleet pins (eks.kubernetes_version "1.35"), as a v1 PodTemplate: kubernetes-validate has no schema for a custom
  resource, and the pod templates are what Kubernetes itself, not the operator, reads.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

# The CRD the cluster gets: the vendored chart's copy (kubeflow/mpi-operator v0.8.0 deploy/v2beta1/mpi-operator.yaml;
# its spec equals manifests/base/kubeflow.org_mpijobs.yaml at the same tag, compared with PyYAML).
CRD_FILE = Path(__file__).resolve().parents[3] / "stacks/constructs/mpi_operator_chart/crds/mpijobs.kubeflow.org.yaml"
KUBERNETES_VERSION = "1.35.0"


@functools.cache
def mpijob_schema() -> dict:
    """The v2beta1 version's openAPIV3Schema, closed: every object schema with properties and without
    additionalProperties or x-kubernetes-preserve-unknown-fields gets additionalProperties: false."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = [version for version in crd["spec"]["versions"] if version["name"] == "v2beta1"]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    _close(schema)
    return schema


def _close(node: object) -> None:
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)


def validate_mpijob(job: dict) -> None:
    """Raises jsonschema.ValidationError for the first problem of JOB against the closed CRD schema; apiVersion and
    kind are the CRD's group/version and kind (the schema leaves them free strings)."""
    assert (job.get("apiVersion"), job.get("kind")) == ("kubeflow.org/v2beta1", "MPIJob")
    jsonschema.Draft7Validator(mpijob_schema()).validate(job)


def validate_pod_templates(job: dict) -> None:
    """Raises kubernetes_validate.ValidationError for the first problem of a replica's pod template."""
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": job["metadata"]["name"]},
            "template": replica["template"],
        }
        kubernetes_validate.validate(pod_template, KUBERNETES_VERSION, strict=True)


def validate_manifest(job: dict) -> None:
    validate_mpijob(job)
    validate_pod_templates(job)
