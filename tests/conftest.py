"""Settings and fixtures every test folder shares.

`assembly` is one synthesis of every shipped environment (cdk-nag attached, cdk.json's context, as `cdk synth`
does it) per test worker; every test that uses it runs in the xdist group "cdk-synth", so it is built once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# jsii warns on every start that Node 20 is past its end of life; the project pins Node 20 (the target machines').
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CDK_CONTEXT = json.loads(Path(__file__).resolve().parent.parent.joinpath("cdk.json").read_text())["context"]


def pytest_collection_modifyitems(items):
    for item in items:
        if "assembly" in getattr(item, "fixturenames", ()) or "tests/stacks" in str(item.fspath):
            item.add_marker(pytest.mark.xdist_group("cdk-synth"))


class Assembly:
    """A synthesized cloud assembly: templates by stack name, and the directory it was written to."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest = json.loads((directory / "manifest.json").read_text())

    def template_file(self, stack_name: str) -> Path:
        return self.directory / f"{stack_name}.template.json"

    def template_json(self, stack_name: str) -> dict:
        return json.loads(self.template_file(stack_name).read_text())

    def template(self, stack_name: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.template_json(stack_name))

    @property
    def stack_names(self) -> list[str]:
        return sorted(
            name
            for name, artifact in self.manifest["artifacts"].items()
            if artifact["type"] == "aws:cloudformation:stack"
        )


def synthesize(directory: Path, environments_dir: Path | None = None) -> Assembly:
    """Synthesize like `cdk synth` does: the context of cdk.json, cdk-nag attached."""
    import aws_cdk as cdk

    from gpufleet.environment import environment_files, load_environments
    from stacks.environment_stacks import add_compliance_checks, add_environment_stacks

    app = cdk.App(outdir=str(directory), context=CDK_CONTEXT)
    add_compliance_checks(app)
    for environment in load_environments(environment_files(environments_dir)):
        add_environment_stacks(app, environment)
    app.synth()
    return Assembly(directory)


@pytest.fixture(scope="session")
def assembly(tmp_path_factory) -> Assembly:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture
def nccl_fixture():
    """Text of a captured nccl-tests log in tests/fixtures/nccl."""
    return lambda name: (FIXTURES / "nccl" / name).read_text()


@pytest.fixture
def topo_fixture():
    """Text of a captured `nvidia-smi topo -m` in tests/fixtures/topo."""
    return lambda name: (FIXTURES / "topo" / name).read_text()


@pytest.fixture
def fixture_path():
    return lambda kind, name: str(FIXTURES / kind / name)
