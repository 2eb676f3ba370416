"""The rules meta is a kind of meta, not an endpoint with a fake URL (issue 43, point 3)."""

import asyncio

import pytest
import yaml

from automem_dagster.llm.config import (
    EndpointConfig,
    EndpointConfigError,
    EndpointsConfig,
    RulesMeta,
    endpoints_with_meta,
    load_endpoints,
)
from automem_dagster.llm.session import connect
from automem_dagster.paths import DEFAULT_ENDPOINTS

RULES_FILE = DEFAULT_ENDPOINTS.parent / "embedded-rules.yaml"


def test_the_shipped_rules_file_names_the_rules_meta_as_a_kind_and_no_endpoint():
    config = load_endpoints(RULES_FILE)
    assert config.rules_meta == RulesMeta(kind="rules")
    assert set(config.roles()) == {"game"}  # the rules meta is no endpoint: nothing to reach or check


def test_meta_rules_on_the_command_line_replaces_the_files_meta_llm_by_the_rules_kind():
    llm = endpoints_with_meta(DEFAULT_ENDPOINTS)
    assert isinstance(llm.meta, EndpointConfig) and llm.rules_meta is None
    rules = endpoints_with_meta(DEFAULT_ENDPOINTS, "rules")
    assert rules.rules_meta is not None and "meta" not in rules.roles() and rules.game == llm.game
    with pytest.raises(EndpointConfigError, match="meta 'llm': give endpoints"):
        endpoints_with_meta(DEFAULT_ENDPOINTS, "llm")


def test_the_old_fake_url_spelling_is_refused_with_the_line_that_replaces_it(tmp_path):
    path = tmp_path / "endpoints.yaml"
    path.write_text(yaml.safe_dump({"game": {"name": "game"}, "meta": {"name": "meta", "base_url": "rules"}}))
    with pytest.raises(EndpointConfigError, match=r"meta\.llm\.base_url.*write `meta: \{kind: rules\}`"):
        load_endpoints(path)


def test_only_the_meta_role_can_be_the_rules_meta():
    with pytest.raises(ValueError, match="game.kind"):
        EndpointsConfig.model_validate({"game": {"kind": "rules"}})
    with pytest.raises(ValueError, match="is not an endpoint"):
        EndpointsConfig(game=EndpointConfig(name="game", base_url="rules"))


def test_a_session_gives_the_rules_meta_no_client_and_records_its_kind(tmp_path):
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url="http://127.0.0.1:9/v1"),
                             meta=RulesMeta(kind="rules"))

    async def described(roles):
        async with connect(config, tmp_path, roles=roles) as clients:
            return clients.meta, clients.rules_meta, clients.describe()

    meta, rules, facts = asyncio.run(described(("meta",)))
    assert meta is None and rules == config.meta and facts == {"meta": {"kind": "rules", "model": "rules"}}
    _, rules, facts = asyncio.run(described(("game",)))
    assert rules is None and set(facts) == {"game"}
