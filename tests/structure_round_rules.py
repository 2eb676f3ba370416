"""A whole structure round with a scripted server as every model: the scripted game model plays ``do``
(which unlocks an achievement within a few steps on these seeds) only when the scaffold's PLAN prompt
carries ``WIN-MARKER``, and ``noop`` otherwise; the meta rules return a fixed diagnosis and a given
patch. ``storage`` is a pytest fixture: a test file takes it as ``storage = round_storage``."""

import json
import shutil

import pytest
from builders import structure_round

from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.loop.settings import Gate, StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import start_round
from automem_dagster.options import Budget
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import episode_id
from automem_dagster.scaffold import load_scaffold

# AutoMem's rule with no floor measured, so that a scripted win on 2 seeds is kept and the loop's keep path runs.
SETTINGS = StructureConfig(budget=Budget(rollout_episodes=2, rollout_max_steps=3, eval_max_steps=10, eval_episodes=2),
                           gate=Gate(rule="higher_mean")).for_game("crafter")
GAME_RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "FAIL-MARKER", "status": 400},
    {"match": "WIN-MARKER", "reply": "<|ACTION|>do<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
]


@pytest.fixture
def storage(tmp_path):
    scaffolds = tmp_path / "scaffolds"
    shutil.copytree(SCAFFOLDS, scaffolds)
    return Storage(runs=tmp_path / "runs", scaffolds=scaffolds, lineage=tmp_path / "lineage")


def diagnosis_reply(storage) -> str:
    seed = start_round(SETTINGS, storage).seeds[0]
    return json.dumps({"summary": "The agent never acts on what it sees and idles every step.", "findings": [
        {"episode": episode_id("crafter", seed), "step": 1, "kind": "stuck", "what_happened": "noop again",
         "scaffold_cause": "the plan prompt does not push for interaction", "proposed_change": "warn when stuck"},
        {"episode": "crafter__seed1", "step": 0, "kind": "other", "what_happened": "x", "scaffold_cause": "y",
         "proposed_change": "z"},
    ]})


def patch_reply(marker: str = "") -> str:
    plan = load_scaffold("crafter", 0).plan_prompt
    patch = {"signals": {"stuck": {"enabled": True, "repeats": 2}},
             "rationale": "Finding 1: the agent idles; a stuck warning and a plan prompt that asks to interact."}
    if marker:
        patch["plan_prompt"] = plan + f" {marker}: face a resource and use do."
    return json.dumps(patch)


def run(storage, server, tracker=None, settings=SETTINGS):
    """One whole round (``builders.structure_round``: a Dagster run, as the CLI runs it), every model ``server``."""
    endpoint = {"base_url": server.base_url, "model": "scripted", "constrained": "none"}
    config = EndpointsConfig(game=EndpointConfig(name="game", **endpoint), meta=EndpointConfig(name="meta", **endpoint))
    return structure_round(storage, config, settings, tracker)


def meta_rules(storage, patch: str | list[str]) -> list[dict]:
    patches = patch if isinstance(patch, list) else [patch]
    return [{"match": "Diagnose this batch", "reply": diagnosis_reply(storage)},
            {"match": "Propose one patch", "replies": patches}]
