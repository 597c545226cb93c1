"""python-env.sh: /etc/gpufleet/python.env from the versions manifest's paths.python_venv, root's and 0644: one line
GPUFLEET_PYTHON_VENV=PATH for an image with a virtualenv, empty for one without; left alone on an image gpufleet did
not build (no manifest: a Deep Learning AMI's step writes it there)."""

from __future__ import annotations

import json
import stat

import pytest

ENV_FILE = "etc/gpufleet/python.env"


def manifest(node, paths: dict | None) -> None:
    path = node.root / "etc/gpufleet/versions.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"profile": "ubuntu2404-cuda13", "components": {"aws_ofi_nccl": "1.21.1"}}
    if paths is not None:
        document["paths"] = paths
    path.write_text(json.dumps(document))


def test_an_image_with_a_virtualenv_names_it(node):
    manifest(node, {"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib", "python_venv": "/opt/gpufleet/pytorch"})
    result = node.run("python-env.sh")
    assert result.stdout == "python-env: /opt/gpufleet/pytorch: written to /etc/gpufleet/python.env\n"
    written = node.root / ENV_FILE
    assert written.read_text() == "GPUFLEET_PYTHON_VENV=/opt/gpufleet/pytorch\n"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert written.stat().st_uid == 0
    assert [p.name for p in written.parent.iterdir() if p.name.startswith("python.env")] == ["python.env"]


@pytest.mark.parametrize("paths", [{"aws_ofi_nccl_lib": "/opt/amazon/ofi-nccl/lib", "python_venv": None}, {}, None])
def test_an_image_without_one_gets_an_empty_file(node, paths):
    (node.root / "etc/gpufleet").mkdir(parents=True)
    (node.root / ENV_FILE).write_text("GPUFLEET_PYTHON_VENV=/opt/old\n")
    manifest(node, paths)
    result = node.run("python-env.sh")
    assert result.stdout == "python-env: no virtualenv on this image: written to /etc/gpufleet/python.env\n"
    assert (node.root / ENV_FILE).read_text() == ""


def test_without_a_manifest_the_file_is_left_to_the_deep_learning_ami_step(node):
    (node.root / "etc/gpufleet").mkdir(parents=True)
    (node.root / ENV_FILE).write_text("GPUFLEET_PYTHON_VENV=/opt/pytorch\n")
    result = node.run("python-env.sh")
    assert result.stdout == "python-env: no versions manifest (not an image gpufleet built): python.env left as it is\n"
    assert (node.root / ENV_FILE).read_text() == "GPUFLEET_PYTHON_VENV=/opt/pytorch\n"


@pytest.mark.parametrize(
    "value", ["opt/gpufleet/pytorch", "/opt/gpufleet/../tmp", "/opt/py torch", "/opt/py\nGPUFLEET_X=1", 3, ["/opt"]]
)
def test_a_path_that_is_not_a_plain_absolute_one_is_refused(node, value):
    manifest(node, {"python_venv": value})
    result = node.run("python-env.sh", check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"python-env: error: {node.root}/etc/gpufleet/versions.json: paths.python_venv is not an absolute path "
        "or null\n"
    )
    assert not (node.root / ENV_FILE).exists()
