"""Settings and fixtures every test folder shares.

`assembly` is one synthesis of every shipped environment (cdk-nag attached, cdk.json's context, as `cdk synth`
does it); `installed_wheel` is gpufleet built into a wheel and installed into a virtualenv of its own
(InstalledWheel). Each is built once: the tests that use it form a group that runs on one pytest-xdist worker
(tests/worker_groups.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.worker_groups import GroupScheduling, misplaced

# jsii warns on every start that Node 20 is past its end of life; the project pins Node 20 (the target machines').
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPOSITORY = Path(__file__).resolve().parent.parent
FIXTURES = REPOSITORY / "tests" / "fixtures"
CDK_CONTEXT = json.loads((REPOSITORY / "cdk.json").read_text())["context"]
# The time the test syntheses take as now (an eks Capacity Block node group's desired size depends on it:
# gpufleet.block_schedule): before the blocks of the tests' files, so their templates do not change as the real clock
# passes the blocks' dates.
SYNTHESIS_TIME = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
# What a wheel is built from: the package (gpufleet/data links to ami/ and scripts/) and its metadata files.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "gpufleet", "ami", "scripts")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(items):
    problems = [line for item in items for line in misplaced(item.nodeid, list(getattr(item, "fixturenames", ())))]
    if problems:
        raise pytest.UsageError("\n".join(problems))


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

    from gpufleet.loading import environment_files, load_environments
    from stacks.environment_stacks import add_compliance_checks, add_environment_stacks

    app = cdk.App(outdir=str(directory), context=CDK_CONTEXT)
    add_compliance_checks(app)
    for environment in load_environments(environment_files(environments_dir)):
        add_environment_stacks(app, environment, SYNTHESIS_TIME)
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


SITE_PACKAGES = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


class InstalledWheel:
    """gpufleet built into a wheel and installed into a virtualenv of its own. The virtualenv reads the test
    environment's site-packages for the dependencies (a .pth line, so nothing is downloaded or installed twice);
    that directory's .pth files are not run, so the editable gpufleet of the checkout stays invisible and
    `import gpufleet` finds only the wheel's (tests check gpufleet.__file__)."""

    def __init__(self, wheel: Path, venv: Path) -> None:
        self.wheel = wheel
        self.venv = venv
        self.python = venv / "bin" / "python"
        self.gpufleet = venv / "bin" / "gpufleet"
        self.site_packages = Path(self._stdout([str(self.python), "-c", SITE_PACKAGES]))

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        """Run the installed console script `gpufleet ARGS` in cwd."""
        return subprocess.run(
            [str(self.gpufleet), *args], cwd=cwd, env=_without_pythonpath(), capture_output=True, text=True
        )

    def attribute(self, module: str, name: str) -> str:
        """str() of module.name as the virtualenv's interpreter imports it."""
        return self._stdout([str(self.python), "-c", f"import {module}; print({module}.{name})"])

    def _stdout(self, command: list[str]) -> str:
        # Run outside the repository: `python -c` puts the current directory first on sys.path.
        result = subprocess.run(command, cwd=self.venv, env=_without_pythonpath(), capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()


def _without_pythonpath() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


def _pip(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def build_installed_wheel(directory: Path) -> InstalledWheel:
    """Build gpufleet's wheel from a copy of the sources (a build writes build/ and *.egg-info next to them) and
    install it into directory/venv, offline: setuptools comes from the test environment (--no-build-isolation)."""
    source = directory / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        path = REPOSITORY / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    _pip(
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--quiet",
        "--wheel-dir",
        str(directory),
        str(source),
    )
    (wheel,) = directory.glob("gpufleet-*.whl")
    venv = directory / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    installed = InstalledWheel(wheel, venv)
    (installed.site_packages / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _pip("--python", str(installed.python), "install", "--no-deps", "--no-index", "--quiet", str(wheel))
    return installed


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> InstalledWheel:
    return build_installed_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def cluster_key(tmp_path_factory) -> tuple[str, str]:
    """A real ed25519 private key in OpenSSH's format (as EC2's CreateKeyPair answers one, and as the cluster user's
    secret holds it), made by the real ssh-keygen, and its public key ("TYPE BASE64")."""
    key = tmp_path_factory.mktemp("key") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)], check=True)
    key_type, body = key.with_suffix(".pub").read_text().split()[:2]
    return key.read_text(), f"{key_type} {body}"
