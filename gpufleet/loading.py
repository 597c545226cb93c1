"""Reading configuration files: environment files (one, a directory, a name) and the AMI pipeline's file.

The one module that brings the models (gpufleet.environment, gpufleet.ami.pipeline) and their validators
(gpufleet.validators) together: each file is parsed (every rule about one field alone), then validated (the rules that
combine fields or need outside knowledge), and every problem of every file is reported at once, one line each. Files
checked together (several files, or a named environment and the files beside it) are then compared with one another
(gpufleet.validators.cross_environment).
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.ami import AMI_DIR, PROFILES_DIR
from gpufleet.ami.pipeline import Pipeline
from gpufleet.config_file import read_model
from gpufleet.environment import Environment
from gpufleet.errors import GpufleetError
from gpufleet.validators import validate_environment
from gpufleet.validators.cross_environment import validate_together
from gpufleet.validators.pipeline import validate_pipeline

ENVIRONMENTS_DIR_VARIABLE = "GPUFLEET_ENVIRONMENTS_DIR"
WHERE_ENVIRONMENTS_ARE = f"run gpufleet where environments/ is, or set {ENVIRONMENTS_DIR_VARIABLE}"
PIPELINE_FILE_VARIABLE = "GPUFLEET_AMI_PIPELINE_FILE"


def environments_dir() -> Path:
    """GPUFLEET_ENVIRONMENTS_DIR, else environments/ in the current directory. Environments are the user's
    configuration, not data shipped with gpufleet: an installed gpufleet has none of its own."""
    return Path(os.environ.get(ENVIRONMENTS_DIR_VARIABLE, Path.cwd() / "environments"))


def environment_files(directory: Path | None = None) -> list[Path]:
    directory = directory or environments_dir()
    return sorted(directory.glob("*.yaml"))


def parse_environment(path: Path) -> Environment:
    """Read and parse one environment file; raise GpufleetError listing every problem found."""
    return read_model(path, Environment, reference="environments/README.md")


def check_environment(path: Path, ami_pipeline: Pipeline | None = None) -> tuple[Environment, list[str]]:
    """Parse and validate one environment file (against the AMI pipeline that publishes its image, when given).
    Errors raise GpufleetError with every problem, one per line; warnings alone do not (gpufleet.validators says
    which rules warn) and come back as lines for the caller to print."""
    environment = parse_environment(path)
    found = validate_environment(environment, path, ami_pipeline=ami_pipeline)
    lines = [problem.line(path) for problem in found]
    if any(problem.severity == "error" for problem in found):
        raise GpufleetError(*lines)
    return environment, lines


def load_environment(path: Path, ami_pipeline: Pipeline | None = None) -> Environment:
    return check_environment(path, ami_pipeline)[0]


def check_environments(paths: list[Path], ami_pipeline: Pipeline | None = None) -> tuple[list[Environment], list[str]]:
    """Check every file, collecting the problems of all of them before failing; then compare the files that passed
    with one another and with the other environment files beside them (gpufleet.validators.cross_environment: a
    problem there is an error). Return the environments and the warning lines."""
    checked: list[tuple[Path, Environment]] = []
    lines: list[str] = []
    failed = False
    for path in paths:
        try:
            environment, warnings = check_environment(path, ami_pipeline)
        except GpufleetError as error:
            failed = True
            lines.extend(error.problems)
        else:
            checked.append((path, environment))
            lines.extend(warnings)
    together = validate_together(checked, beside=environments_beside(paths))
    if failed or together:
        raise GpufleetError(*lines, *together)
    return [environment for _, environment in checked], lines


def environments_beside(paths: list[Path]) -> list[tuple[Path, Environment]]:
    """The other environment files (*.yaml) in the directories of PATHS, those that parse: `cdk deploy -c env=NAME`
    loads one environment, and must still see the others it may clash with. A file that does not parse is left out
    (it reports its own problems when it is checked, and cannot be deployed until then)."""
    given = {path.resolve() for path in paths}
    beside: list[tuple[Path, Environment]] = []
    directories: dict[Path, Path] = {}
    for path in paths:
        directories.setdefault(path.parent.resolve(), path.parent)
    for directory in directories.values():
        for path in environment_files(directory):
            if path.resolve() in given:
                continue
            try:
                beside.append((path, parse_environment(path)))
            except GpufleetError:
                continue
    return beside


def load_environments(paths: list[Path], ami_pipeline: Pipeline | None = None) -> list[Environment]:
    return check_environments(paths, ami_pipeline)[0]


def load_named_environment(name: str, ami_pipeline: Pipeline | None = None) -> Environment:
    path = environments_dir() / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in environment_files()) or f"none; {WHERE_ENVIRONMENTS_ARE}"
        raise GpufleetError(f"{path}: unknown environment '{name}' (known: {known})")
    return load_environments([path], ami_pipeline)[0]


def parse_pipeline(path: Path) -> Pipeline:
    return read_model(path, Pipeline, reference="ami/pipeline.yaml's comments")


def pipeline_file() -> Path:
    return Path(os.environ.get(PIPELINE_FILE_VARIABLE, AMI_DIR / "pipeline.yaml"))


def load_pipeline(path: Path | None = None, profiles_dir: Path = PROFILES_DIR) -> Pipeline:
    """Parse and validate the pipeline configuration; raise GpufleetError with every problem, one per line."""
    path = path or pipeline_file()
    pipeline = parse_pipeline(path)
    problems = validate_pipeline(pipeline, profiles_dir)
    if problems:
        raise GpufleetError(*(problem.line(path) for problem in problems))
    return pipeline
