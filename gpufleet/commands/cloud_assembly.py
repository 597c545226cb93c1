"""Reading a synthesized cloud assembly (cdk.out): its files through JsonFile, the stacks its manifest lists.

gpufleet summary and gpufleet plan read assemblies; each says in ``fix`` what to do about a damaged file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from gpufleet.input_files import MIB, JsonFile, quoted

# CloudFormation takes a template of at most 1 MB (source: awsdocs/aws-cloudformation-user-guide,
# cloudformation-limits.md, "Template body size in an Amazon S3 object"); gpufleet's are about 60 KB and the
# manifest of the four shipped environments about 40 KB. 16 MiB leaves room for many environments.
MAX_ASSEMBLY_FILE_BYTES = 16 * MIB
# A stack name: a letter, then letters, digits and hyphens (source: AWS CloudFormation API Reference, CreateStack,
# StackName). The artifact id of each gpufleet stack is its stack name, and names its template file.
STACK_NAME = re.compile(r"[A-Za-z][-A-Za-z0-9]{0,127}")
# The artifact type of a stack as manifest.json spells it (aws-cdk-lib 2.275.0, aws_cdk.cloud_assembly_schema
# ArtifactType.AWS_CLOUDFORMATION_STACK; what the tests' synthesis writes).
STACK_ARTIFACT = "aws:cloudformation:stack"


def assembly_file(path: Path, fix: str) -> JsonFile:
    """A JSON file of the assembly (the manifest, a template); problems exit 1."""
    return JsonFile(
        path, limit=MAX_ASSEMBLY_FILE_BYTES, expected="a file of a cloud assembly (tens of KB)", fix=fix, exit_code=1
    )


def stack_artifacts(manifest: JsonFile, wanted: Callable[[str], bool]) -> dict[str, dict]:
    """The manifest's stack artifacts whose name ``wanted`` takes, by name, in manifest order; each name checked to
    be a stack name (it names the template file and is printed)."""
    found = {}
    for name, artifact in manifest.get(manifest.document, ("artifacts",), dict).items():
        kind = manifest.get(artifact, ("artifacts", name, "type"), str)
        if kind != STACK_ARTIFACT or not wanted(name):
            continue
        if not STACK_NAME.fullmatch(name):
            raise manifest.error(("artifacts",), f"{quoted(name)} is not a stack name")
        found[name] = artifact
    return found
