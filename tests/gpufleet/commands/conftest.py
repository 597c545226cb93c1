from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def nccl_fixture():
    return lambda name: (FIXTURES / "nccl" / name).read_text()


@pytest.fixture
def topo_fixture():
    return lambda name: (FIXTURES / "topo" / name).read_text()


@pytest.fixture
def fixture_path():
    return lambda kind, name: str(FIXTURES / kind / name)
