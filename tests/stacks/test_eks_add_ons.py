"""The add-ons of the eks flavour (stacks/constructs/eks_add_ons.py) in the matrix's eks stacks (tests/stacks/matrix.py,
synthesized with cdk-nag attached): eks-p5 has every add-on and a new file system, eks-g5 none (and no EFA). The
chart versions, values and the vendored MPI operator chart are held to what each avoids (docs/design-eks.md)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpufleet.catalog import load_catalog
from tests.conftest import REPOSITORY

MPI_CHART = REPOSITORY / "stacks" / "constructs" / "mpi_operator_chart"
EFA_PLUGIN_INSTANCE_TYPES = Path(__file__).with_name("data") / "efa-device-plugin-v0.5.30-instance-types.yaml"
# The cap on the kubectl.kubernetes.io/last-applied-configuration annotation (shared facts: 262144 bytes).
LAST_APPLIED_CAP = 262144


def of_type(template: dict, resource_type: str) -> dict:
    return {logical_id: r for logical_id, r in template["Resources"].items() if r["Type"] == resource_type}


def charts(template: dict) -> dict[str, dict]:
    """Helm releases by release name: their properties, with Values parsed (a Fn::Join keeps its pieces)."""
    found = {}
    for resource in of_type(template, "Custom::AWSCDK-EKS-HelmChart").values():
        properties = {key: value for key, value in resource["Properties"].items() if key not in ("ServiceToken",)}
        values = properties.get("Values")
        if isinstance(values, str):
            properties["Values"] = json.loads(values)
        found[properties.pop("Release")] = properties
    return found


@pytest.fixture(scope="module")
def eks_p5(matrix_assembly) -> dict:
    return matrix_assembly.template_json("gpufleet-eks-p5-eks")


def test_the_efa_plugin_is_the_pinned_chart_with_the_regions_image_on_the_efa_gpu_nodes(eks_p5):
    efa = charts(eks_p5)["aws-efa-k8s-device-plugin"]
    assert {key: efa[key] for key in ("Chart", "Version", "Repository", "Namespace")} == {
        "Chart": "aws-efa-k8s-device-plugin",
        "Version": "v0.5.30",
        "Repository": "https://aws.github.io/eks-charts",
        "Namespace": "kube-system",
    }
    # The image from us-west-2's registry for eks-p5 (us-west-2), the domain from the partition.
    assert efa["Values"] == {
        "Fn::Join": [
            "",
            [
                '{"image":{"repository":"602401143452.dkr.ecr.us-west-2.',
                {"Ref": "AWS::URLSuffix"},
                '/eks/aws-efa-k8s-device-plugin","tag":"v0.5.20"},"nodeSelector":{"vpc.amazonaws.com/efa.present":'
                '"true"},"tolerations":[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]}',
            ],
        ]
    }


def test_the_nvidia_plugin_leaves_the_efa_devices_alone_and_runs_on_the_gpu_nodes(eks_p5):
    nvidia = charts(eks_p5)["nvidia-device-plugin"]
    assert nvidia == {
        "ClusterName": {"Ref": "ClusterEB0386A7"},
        "Chart": "nvidia-device-plugin",
        "Version": "0.19.3",
        "Repository": "https://nvidia.github.io/k8s-device-plugin",
        "Namespace": "nvidia-device-plugin",
        "CreateNamespace": True,
        "Values": {
            "mofedEnabled": False,
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def test_the_mpi_operator_and_the_fsx_csi_driver_are_installed_as_charts(eks_p5):
    releases = charts(eks_p5)
    assert sorted(releases) == [
        "aws-efa-k8s-device-plugin",
        "aws-fsx-csi-driver",
        "mpi-operator",
        "nvidia-device-plugin",
    ]
    mpi = releases["mpi-operator"]
    assert mpi["Namespace"] == "mpi-operator" and "Repository" not in mpi and "Chart" not in mpi
    assert mpi["ChartAssetURL"].startswith("s3://cdk-hnb659fds-assets-123456789012-us-west-2/")
    fsx = releases["aws-fsx-csi-driver"]
    assert {key: fsx[key] for key in ("Chart", "Version", "Repository", "Namespace", "Values")} == {
        "Chart": "aws-fsx-csi-driver",
        "Version": "1.17.0",
        "Repository": "https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
        "Namespace": "kube-system",
        # The region written out: the node plugin is no host-network pod, and IMDS does not answer it on the GPU nodes
        # (hop limit 1), where it would otherwise ask for the region at start.
        "Values": {"nodeComponentOnly": True, "node": {"region": "us-west-2"}},
    }


def test_the_file_system_of_the_storage_stack_is_a_volume_and_a_claim_pods_mount(eks_p5):
    (manifest,) = of_type(eks_p5, "Custom::AWSCDK-EKS-KubernetesResource").values()
    rendered = manifest["Properties"]["Manifest"]
    # The file system's id, DNS name and mount name are the storage stack's exports: the manifest joins them in.
    pieces = rendered["Fn::Join"][1]
    imports = [piece["Fn::ImportValue"] for piece in pieces if isinstance(piece, dict)]
    assert [name.split(":")[1].split("ExportsOutput")[1][:-8] for name in imports] == [
        "RefFileSystem",
        "FnGetAttFileSystemDNSName",
        "FnGetAttFileSystemLustreMountName",
    ]
    text = "".join(piece if isinstance(piece, str) else "<IMPORT>" for piece in pieces)
    volume, claim = json.loads(text)
    assert volume == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "gpufleet-shared", "labels": volume["metadata"]["labels"]},
        "spec": {
            "capacity": {"storage": "1200Gi"},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "mountOptions": ["flock"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {
                "driver": "fsx.csi.aws.com",
                "volumeHandle": "<IMPORT>",
                "volumeAttributes": {"dnsname": "<IMPORT>", "mountname": "<IMPORT>"},
            },
        },
    }
    assert claim["metadata"]["name"] == "gpufleet-shared" and claim["metadata"]["namespace"] == "default"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "",
        "resources": {"requests": {"storage": "1200Gi"}},
        "volumeName": "gpufleet-shared",
    }


def test_the_gpu_nodes_reach_the_file_system_through_the_efa_security_group(eks_p5):
    ingress = [
        rule["Properties"]
        for rule in of_type(eks_p5, "AWS::EC2::SecurityGroupIngress").values()
        if rule["Properties"].get("Description") == "Lustre from the gpufleet nodes"
    ]
    assert sorted((rule["FromPort"], rule["ToPort"]) for rule in ingress) == [(988, 988), (1018, 1023)]
    for rule in ingress:
        assert rule["SourceSecurityGroupId"]["Fn::GetAtt"][0].startswith("EfaSecurityGroup")


def test_without_add_ons_there_is_no_kubectl_handler(matrix_assembly):
    template = matrix_assembly.template_json("gpufleet-eks-g5-eks")
    for resource_type in (
        "Custom::AWSCDK-EKS-HelmChart",
        "Custom::AWSCDK-EKS-KubernetesResource",
        "AWS::Lambda::LayerVersion",
    ):
        assert of_type(template, resource_type) == {}, resource_type
    # Only aws-cdk-lib's AwsCustomResource function, which makes the control-plane log group.
    assert list(of_type(template, "AWS::Lambda::Function")) == ["AWS679f53fac002430cb0da5b7982bd22872D164C4C"]


def test_without_efa_the_gpu_nodes_get_no_efa_label_and_no_huge_pages(matrix_assembly):
    template = matrix_assembly.template_json("gpufleet-eks-g5-gpu-nodes")
    groups = [
        group["Properties"]
        for group in of_type(template, "AWS::EKS::Nodegroup").values()
        if group["Properties"].get("AmiType") == "AL2023_x86_64_NVIDIA"
    ]
    assert [group["Labels"] for group in groups] == [{"nvidia.com/gpu.present": "true"}]
    (launch_template,) = of_type(template, "AWS::EC2::LaunchTemplate").values()
    user_data = launch_template["Properties"]["LaunchTemplateData"]["UserData"]
    assert "nr_hugepages" not in base64.b64decode(user_data).decode()


def test_every_catalog_type_with_efa_is_one_the_efa_plugin_chart_runs_on():
    """The chart runs its DaemonSet only on the instance types it lists: a type missing there gets no EFA devices."""
    listed = yaml.safe_load(EFA_PLUGIN_INSTANCE_TYPES.read_text())["supportedInstanceLabels"]["values"]
    efa_types = sorted(name for name, instance in load_catalog().items() if instance.efa_supported)
    assert efa_types == ["g5.48xlarge", "g5.8xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]
    assert [name for name in efa_types if name not in listed] == []


def test_the_mpi_operator_chart_holds_its_crd_for_helm_and_grants_leases():
    (crd,) = yaml.safe_load_all((MPI_CHART / "crds" / "mpijobs.kubeflow.org.yaml").read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    # Too large for the last-applied annotation that kubectl create --save-config writes: why Helm installs it.
    assert len(json.dumps(crd, separators=(",", ":"))) == 313477 > LAST_APPLIED_CAP
    documents = list(yaml.safe_load_all((MPI_CHART / "templates" / "mpi-operator.yaml").read_text()))
    assert [document["kind"] for document in documents] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ]
    operator_role = next(d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "mpi-operator")
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]} in operator_role["rules"]
    (deployment,) = (d for d in documents if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mpioperator/mpi-operator:0.8.0"
    assert container["args"] == ["-alsologtostderr", "--lock-namespace=mpi-operator"]
    assert yaml.safe_load((MPI_CHART / "Chart.yaml").read_text())["version"] == "0.8.0"


def test_every_manifest_the_cluster_gets_passes_the_kubernetes_schemas(eks_p5):
    """kubernetes-validate's strict schemas of the pinned Kubernetes version (unknown fields refused): the volume and
    claim the stack applies, with the imported values filled in, and every object of the vendored MPI operator chart
    but its CRD (a CustomResourceDefinition is checked as one, not against its own schema)."""
    (manifest,) = of_type(eks_p5, "Custom::AWSCDK-EKS-KubernetesResource").values()
    pieces = manifest["Properties"]["Manifest"]["Fn::Join"][1]
    text = "".join(piece if isinstance(piece, str) else "fs-0123456789abcdef0" for piece in pieces)
    chart = REPOSITORY / "stacks/constructs/mpi_operator_chart"
    objects = json.loads(text) + [
        document
        for path in sorted(chart.glob("*/*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]

    for document in objects:
        kubernetes_validate.validate(document, "1.35.0", strict=True)
    assert sorted({document["kind"] for document in objects}) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "ServiceAccount",
    ]


def test_a_misspelt_field_fails_the_kubernetes_schemas():
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "gpufleet-shared"},
        "spec": {"accessMode": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }

    with pytest.raises(kubernetes_validate.ValidationError, match="accessMode"):
        kubernetes_validate.validate(volume, "1.35.0", strict=True)
