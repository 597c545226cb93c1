"""The import contracts of pyproject.toml ([tool.importlinter], run by `make lint`): the tree keeps them, and a planted
import from a layer above breaks the contract that forbids it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS = "gpufleet's layers: no module imports from a layer above it"
STACKS = "stacks use configuration, never loading, validation or the operator layer"
NO_STACKS = "gpufleet never imports the stacks"
FALLBACK_RUNTIME = "stacks/constructs/capacity_fallback/runtime"
TEARDOWN_RUNTIME = "stacks/constructs/fleet_teardown/runtime"
GROUP_CAPACITY_RUNTIME = "stacks/constructs/group_capacity/runtime"
LAMBDA = (
    "Lambda runtime code imports only the gpufleet modules the assets carry (constants, fallback, aws_faults, "
    "checkpoint_hook, ssm_batches)"
)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        capture_output=True,
        text=True,
    )


def broken_contracts(output: str) -> list[str]:
    """The names of the contracts lint-imports reports broken (each heading of its "Broken contracts" section)."""
    _, _, broken = output.partition("Broken contracts")
    lines = broken.splitlines()
    return [line for line, underline in zip(lines, lines[1:], strict=False) if line and set(underline) == {"-"}]


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # Indirect imports count: the Lambda code imports the vocabulary, the stacks import the models.
        ("gpufleet/constants.py", "from gpufleet import errors", [LAYERS, LAMBDA]),
        ("gpufleet/aws_faults.py", "from gpufleet.aws import Aws", [LAYERS, LAMBDA]),
        ("gpufleet/ssm_batches.py", "from gpufleet.aws import error_code", [LAYERS, LAMBDA]),
        ("gpufleet/environment.py", "from gpufleet.loading import load_environment", [LAYERS, STACKS]),
        ("gpufleet/validators/node.py", "from gpufleet.loading import load_environment", [LAYERS]),
        ("gpufleet/ami/pipeline.py", "from gpufleet.user_data import render_user_data", [LAYERS]),
        ("gpufleet/ops/fleet.py", "from gpufleet.commands import status", [LAYERS]),
        ("gpufleet/catalog.py", "from gpufleet.environment import Environment", [LAYERS]),
        ("stacks/constructs/node_group.py", "from gpufleet.ops import fleet", [STACKS]),
        ("stacks/network_stack.py", "from gpufleet.loading import load_environment", [STACKS]),
        ("gpufleet/ops/plan.py", "import stacks.cluster_stack", [NO_STACKS]),
        (f"{FALLBACK_RUNTIME}/handler.py", "from gpufleet.catalog import load_catalog", [LAMBDA]),
        (f"{FALLBACK_RUNTIME}/state_cleanup.py", "from gpufleet.errors import GpufleetError", [LAMBDA]),
        (f"{FALLBACK_RUNTIME}/handler.py", "from stacks.constructs import lambda_functions", [LAMBDA]),
        (f"{TEARDOWN_RUNTIME}/handler.py", "from gpufleet.aws import Aws", [LAMBDA]),
        (f"{GROUP_CAPACITY_RUNTIME}/handler.py", "from gpufleet.environment import Environment", [LAMBDA]),
        (
            f"{GROUP_CAPACITY_RUNTIME}/handler.py",
            "from stacks.constructs.group_capacity import infrastructure",
            [LAMBDA],
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(tmp_path, module, planted, broken):
    for package in ("gpufleet", "stacks"):
        shutil.copytree(ROOT / package, tmp_path / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{planted}\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1
    assert broken_contracts(result.stdout) == broken


def test_the_vocabulary_imports_nothing():
    tree = ast.parse((ROOT / "gpufleet" / "constants.py").read_text())
    assert [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)] == []
