"""Only stacks receive an Environment or a Pipeline: every construct and construct helper of stacks/constructs/ takes
the plain values it uses, keyword-only after the scope and id (aws-samples/aws-cdk-project-structure-python's
style), so a construct says in its signature what it depends on."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONSTRUCTS = Path(__file__).resolve().parents[3] / "stacks" / "constructs"
WHOLE_FILES = {"Environment", "Pipeline"}


def annotations(node: ast.FunctionDef) -> list[str]:
    arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    return [ast.unparse(argument.annotation) for argument in arguments if argument.annotation is not None]


def functions(path: Path) -> list[ast.FunctionDef]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)]


def construct_modules() -> list[Path]:
    return sorted(path for path in CONSTRUCTS.rglob("*.py") if "runtime" not in path.parts)


@pytest.mark.parametrize("path", construct_modules(), ids=lambda path: str(path.relative_to(CONSTRUCTS)))
def test_no_construct_takes_a_whole_configuration_file(path):
    taking = [
        f"{node.name}({annotation})"
        for node in functions(path)
        for annotation in annotations(node)
        if any(name in WHOLE_FILES for name in annotation.replace("|", " ").split())
    ]
    assert taking == []


@pytest.mark.parametrize("path", construct_modules(), ids=lambda path: str(path.relative_to(CONSTRUCTS)))
def test_constructs_take_their_values_by_keyword(path):
    positional = [
        node.name
        for node in functions(path)
        if node.name == "__init__"
        and [argument.arg for argument in node.args.args] != ["self", "scope", "construct_id"]
    ]
    assert positional == []


def test_the_check_sees_a_whole_configuration_file(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def helper(environment: Environment | None, name: str): ...\n")
    assert [annotations(node) for node in functions(probe)] == [["Environment | None", "str"]]
