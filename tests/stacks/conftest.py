"""One synthesis of every shipped environment per test worker, with cdk-nag attached as in app.py.

All tests under tests/stacks run in one xdist group so that the synthesis (the slow part) happens once.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from gpufleet.environment import environment_files, load_environments
from stacks.environment_stacks import add_compliance_checks, add_environment_stacks


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/stacks" in str(item.fspath):
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

    def template(self, stack_name: str) -> Template:
        return Template.from_json(self.template_json(stack_name))

    @property
    def stack_names(self) -> list[str]:
        return sorted(
            name
            for name, artifact in self.manifest["artifacts"].items()
            if artifact["type"] == "aws:cloudformation:stack"
        )


def synthesize(directory: Path, environments_dir: Path | None = None) -> Assembly:
    app = cdk.App(outdir=str(directory))
    add_compliance_checks(app)
    for environment in load_environments(environment_files(environments_dir)):
        add_environment_stacks(app, environment)
    app.synth()
    return Assembly(directory)


@pytest.fixture(scope="session")
def assembly(tmp_path_factory) -> Assembly:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))
