"""A structure round materialized in process on real Crafter with one scripted server as every model: the
game model plays ``do`` only when the PLAN prompt carries ``WIN-MARKER``, so a patch adding the marker
(``winning_patch``) makes a candidate that really wins on the evaluation seeds; ``meta_rules`` answer the
diagnosis and the revision. The budget is 2 episodes of 3 (rollouts) and 10 (evaluation) steps."""

import json

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.evaluation.checks import evaluation_gate
from automem_dagster.defs.resources import StorageResource
from automem_dagster.defs.structure.assets import (
    candidate_evaluation,
    champion_scaffold,
    diagnosis,
    rollout_batch,
    scaffold_candidate,
)
from automem_dagster.loop.structure import start_round
from automem_dagster.rollout import episode_id
from automem_dagster.scaffold import load_scaffold

ROUND = [rollout_batch, diagnosis, scaffold_candidate, candidate_evaluation, champion_scaffold, evaluation_gate]

# AutoMem's rule, no floor measured: a scripted win on 2 seeds is kept, so the keep path runs end to end.
RUN_CONFIG = dg.RunConfig(ops={"rollout_batch": RoundConfig(budget={"rollout_max_steps": 3}, gate={"rule": "higher_mean"}),
                               "candidate_evaluation": RoundConfig(gate={"rule": "higher_mean"})})

GAME_RULES = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    {"match": "WIN-MARKER", "reply": "<|ACTION|>do<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
]

def meta_rules(storage: StorageResource, patches: list[str]) -> list[dict]:
    store = storage.storage()
    seed = start_round(RUN_CONFIG.ops["rollout_batch"].for_game("crafter"), store).seeds[0]
    reply = {"summary": "The agent never acts on what it sees and idles every step.", "findings": [
        {"episode": episode_id("crafter", seed), "step": 1, "kind": "stuck", "what_happened": "noop again",
         "scaffold_cause": "the plan prompt does not push for interaction", "proposed_change": "warn when stuck"}]}
    return [{"match": "Diagnose this batch", "reply": json.dumps(reply)},
            {"match": "Propose one patch", "replies": patches}]

def winning_patch() -> str:
    plan = load_scaffold("crafter", 0).plan_prompt
    return json.dumps({"signals": {"stuck": {"enabled": True, "repeats": 2}},
                       "plan_prompt": plan + " WIN-MARKER: face a resource and use do.",
                       "rationale": "Finding 1: the agent idles; a stuck warning and a plan prompt that asks to interact."})
