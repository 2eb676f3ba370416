"""The project's grammars and reply schemas through the engines real servers run, not only the
project's own rules: vLLM's grammar engine xgrammar, at the version vLLM pins (0.1.29 in vLLM's
requirements/common.txt), compiles every turn grammar and every JSON schema of every shipped
scaffold of the three games, and the openai package's own strict-schema conversion
(``openai.lib._pydantic``, openai 3.57.0) finds nothing to change in any schema."""

import copy
import json

import pytest
import xgrammar as xg
from openai.lib._pydantic import _ensure_strict_json_schema

from automem_dagster.endpoint_checks import OFF_FORMAT, PROBE_SCHEMA, request_schemas, turn_constraints
from automem_dagster.games.builtin import BUILTIN
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.scaffold import load_scaffold

GAME_OF = {env.family: f"{env.family}:{env.tasks[0]}" if env.tasks else env.family for env in BUILTIN}
"""One game per built-in environment: every family's grammars and schemas go through vLLM's engine."""
SHIPPED = [(family, int(path.stem.lstrip("v"))) for family in sorted(GAME_OF)
           for path in sorted((SCAFFOLDS / family).glob("v*.yaml"))]
VOCAB = [chr(i) for i in range(32, 127)] + ["\n", "<eos>"]
"""A character vocabulary (every reply is printable ASCII and line breaks) with a stop token."""


@pytest.fixture(scope="module")
def compiler():
    return xg.GrammarCompiler(xg.TokenizerInfo(VOCAB, stop_token_ids=[len(VOCAB) - 1]))


def accepts(compiled, text: str) -> bool:
    """Whether ``text`` is a whole reply the compiled grammar admits (it may stop right after)."""
    matcher = xg.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.accept_token(len(VOCAB) - 1)


def test_every_game_has_a_shipped_scaffold():
    assert {family for family, _ in SHIPPED} == set(GAME_OF)


@pytest.mark.parametrize(("family", "version"), SHIPPED)
def test_xgrammar_compiles_every_grammar_and_schema_sent(family, version, compiler):
    scaffold = load_scaffold(family, version)
    for name, constraint in turn_constraints(GAME_OF[family], scaffold).items():
        assert compiler.compile_grammar(constraint.grammar) is not None, name
    for name, schema in request_schemas(GAME_OF[family], scaffold).items():
        assert compiler.compile_json_schema(json.dumps(schema), strict_mode=True) is not None, name


def test_the_endpoints_probe_breaks_the_grammar_and_the_schema_unless_they_are_applied(compiler):
    """The check's question is answered by a free model with a sentence: neither the action grammar
    nor the probe schema admits one, so a reply that parses shows the server applied them."""
    action = turn_constraints("crafter", load_scaffold("crafter", 0))["action_turn"]
    grammar = compiler.compile_grammar(action.grammar)
    assert accepts(grammar, "<|ACTION|>noop<|END|>") and not accepts(grammar, "The sky is blue.")
    schema = compiler.compile_json_schema(json.dumps(PROBE_SCHEMA), strict_mode=True)
    assert accepts(schema, '{"ok": true}') and not accepts(schema, "The sky is blue.")
    assert "plain English sentence" in OFF_FORMAT


@pytest.mark.parametrize("family", sorted(GAME_OF))
def test_openais_own_strict_conversion_leaves_every_schema_as_sent(family):
    for name, schema in request_schemas(GAME_OF[family], load_scaffold(family, 0)).items():
        converted = copy.deepcopy(schema)
        assert _ensure_strict_json_schema(converted, path=(), root=converted) == schema, name


def test_a_consultation_held_to_a_least_number_of_reads_cannot_end_unread(compiler):
    """``limits.plan_min_reads``: through vLLM's engine, the grammar and the JSON schema of a two-model
    consultation refuse an early ``<|DONE|>`` while a file has content, and still admit it when none has
    (nothing to read: the end is all there is)."""
    from automem_dagster.agent.turn_format import TurnFormats
    from automem_dagster.memory.ops import OpName

    formats = TurnFormats([OpName.READ, OpName.APPEND], 64, 24, 24)
    free = formats.plan_turn(["notes.txt"], ["forward"], True, end_with_done=True, reads=2)
    held = formats.plan_turn(["notes.txt"], ["forward"], True, end_with_done=True, reads=2, least=1)
    empty = formats.plan_turn([], ["forward"], True, end_with_done=True, reads=2, least=1)
    for turn, done, read in ((free, True, True), (held, False, True), (empty, True, False)):
        grammar = compiler.compile_grammar(turn.grammar)
        assert accepts(grammar, "<|DONE|>") is done and accepts(grammar, "<|READ|>notes.txt") is read, turn.grammar
        schema = compiler.compile_json_schema(json.dumps(turn.schema), strict_mode=True)
        assert accepts(schema, '{"next": {"done": true}}') is done, turn.schema
        assert accepts(schema, '{"next": {"reads": [{"op": "READ", "file": "notes.txt"}]}}') is read, turn.schema
    assert not accepts(compiler.compile_json_schema(json.dumps(held.schema), strict_mode=True), '{"next": {"reads": []}}')
    one_model = formats.plan_turn(["notes.txt"], ["forward"], True, reads=2, least=1)
    assert not accepts(compiler.compile_grammar(one_model.grammar), "<|ACTION|>forward<|END|>")
