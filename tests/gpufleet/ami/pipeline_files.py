"""AMI pipeline files for the tests of the pipeline model, its rules and loading: the shipped ami/pipeline.yaml with
changes, and the problems loading a file reports (without the file name each line starts with)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.errors import GpufleetError
from gpufleet.loading import load_pipeline

SHIPPED = Path(__file__).resolve().parents[3] / "ami" / "pipeline.yaml"


def write(tmp_path: Path, **changes) -> Path:
    document = yaml.safe_load(SHIPPED.read_text())
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            document[section][key] = value
        else:
            document[section] = value
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(GpufleetError) as error:
        load_pipeline(path)
    return [line.removeprefix(f"{path}: ") for line in error.value.problems]
