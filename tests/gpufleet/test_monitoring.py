"""The CloudWatch agent configuration the nodes get, against the agent's own schema: the pinned agent (1.300071.0)
checks its configuration against tests/fixtures/cloudwatch-agent/schema-1.300071.0.json and refuses to start on any
error (tests/fixtures/cloudwatch-agent/SOURCE.md), which would leave every node not ready."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpufleet.catalog import load_catalog
from gpufleet.loading import environment_files, load_named_environment
from gpufleet.monitoring import MARKET_PLACEHOLDER, agent_configuration
from gpufleet.user_data import SETUP_UNIT, WATCHER_UNIT

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures/cloudwatch-agent/schema-1.300071.0.json").read_text()
)
# The schema declares draft 4 ("$schema": "http://json-schema.org/draft-04/schema#"), as gojsonschema reads it.
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)


def problems(configuration: dict) -> list[str]:
    return sorted(f"{list(error.absolute_path)}: {error.message}" for error in VALIDATOR.iter_errors(configuration))


@pytest.mark.parametrize("name", [path.stem for path in environment_files()])
@pytest.mark.parametrize("efa", [True, False])
@pytest.mark.parametrize("market", ["spot", "on-demand"])
def test_every_configuration_the_nodes_get_is_one_the_agent_accepts(name, efa, market):
    env = load_named_environment(name).model_copy(update={"efa": efa})
    configuration = agent_configuration(env, load_catalog()[env.instance_type], [WATCHER_UNIT, SETUP_UNIT])
    # As cloudwatch-agent.sh hands it to the agent: the node's market in place of the placeholder.
    on_the_node = json.loads(json.dumps(configuration).replace(MARKET_PLACEHOLDER, market))

    assert problems(on_the_node) == []


def test_the_schema_catches_a_key_the_agent_does_not_know():
    """The check is not vacuous: journald's key is `units`, and `unit` is refused (additionalProperties false)."""
    env = load_named_environment("dev")
    configuration = agent_configuration(env, load_catalog()[env.instance_type], [SETUP_UNIT])
    entry = configuration["logs"]["logs_collected"]["journald"]["collect_list"][0]
    entry["unit"] = entry.pop("units")

    assert problems(configuration) == [
        "['logs', 'logs_collected', 'journald', 'collect_list', 0]: "
        "Additional properties are not allowed ('unit' was unexpected)"
    ]
