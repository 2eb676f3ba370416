"""A whole proficiency round with a scripted server as every model, for the Dagster and CLI round tests.

The one-model agent appends a note in LOG and reads the file back in PLAN before acting, so every write is
read by a later PLAN and curation finds credited decisions; the meta-LLM keeps every borderline decision it
reviews and recommends small LoRA settings. The specialist is served as a vLLM user's is: the endpoints
file's ``memory:`` role is the scripted vLLM stand-in (conftest ``specialist_vllm``, the same rules), which
loads the adapter at runtime after the project checks its base. The frozen game model of the two-model
agent answers ``do`` while the one-model champion answers ``noop``, so a trained specialist wins the gate.
``proficiency_resources`` is a pytest fixture: a test file takes it as ``resources = proficiency_resources``."""

import json

import dagster as dg
import pytest
from builders import mlflow_resource, round_resources

from automem_dagster.defs.proficiency.assets import (
    champion_specialist,
    lora_adapter,
    lora_config,
    sft_dataset,
    specialist_evaluation,
    training_rollouts,
)
from automem_dagster.defs.proficiency.checks import specialist_gate
from automem_dagster.defs.proficiency.config import ProficiencyConfig

ROUND = [training_rollouts, sft_dataset, lora_config, lora_adapter, specialist_evaluation, champion_specialist,
         specialist_gate]
PROFICIENCY_ASSETS = {"training_rollouts", "sft_dataset", "lora_config", "lora_adapter", "specialist_evaluation",
                      "champion_specialist"}
NOTES = [f"<|APPEND|>map_notes.txt|tree seen at spot {i}\n<|DONE|>" for i in range(12)]
GAME_RULES = [
    {"match": "Phase: LOG", "replies": NOTES},
    # The frozen game model of the two-model agent, then the specialist's PLAN turns.
    {"match": "Phase: PLAN. Answer with the action.", "reply": "<|ACTION|>do<|END|>"},
    {"match": "(another model picks the action).\n<|READ|>", "reply": "<|DONE|>"},
    # The one-model agent: read the notes, then act on them.
    {"match": "then answer with the action.\n<|READ|>", "reply": "<|ACTION|>noop<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|READ|>map_notes.txt"},
]
LORA_REPLY = {"reasoning": "A tiny dataset: a small rank, one epoch and some dropout against memorising.",
              "settings": {"rank": 8, "alpha": 16, "dropout": 0.05, "learning_rate": 2e-4, "epochs": 1,
                           "batch_size": 1, "target_modules": ["q_proj", "v_proj"], "max_length": 2048}}
META_RULES = [
    {"match": "You configure the LoRA fine-tuning", "reply": json.dumps(LORA_REPLY)},
    {"match": "Give a judgement", "reply": json.dumps({"judgements": [
        {"id": i, "keep": True, "reason": "records where a tree is, read before acting"} for i in range(8)]})},
]


def round_config(**overrides) -> dg.RunConfig:
    """One budget for every asset of the round: 4 training episodes of 8 steps (the memory routine
    first writes at step 5 and the PLAN reads it there; curation credits only that, 3 examples an
    episode, so the held-out validation episode is small: on two CPU cores the trainer needs seconds
    per ~700-token Crafter prompt), a window of 2 steps, 1 optimizer step, 2 evaluation episodes of
    10 steps. No counterfactual replay (the default replays every eligible decision), so the round opts in
    to train on unmeasured decisions (``keep_unmeasured``): these tests are about the assets, and the replay
    could drop the 6 examples they train on; tests/contract/test_known_answer_variants.py checks
    the replay. ``overrides`` replace options part by part (``curation={"min_examples": 10_000}``)."""
    parts = {"budget": {"rollout_episodes": 4, "rollout_max_steps": 8},
             "curation": {"score_window": 2, "min_examples": 6, "max_review_batches": 4, "replay": {"decisions": 0},
                          "keep_unmeasured": True},
             "training": {"max_train_steps": 1, "base": "embedded"}, "gate": {"rule": "higher_mean"}}
    config = ProficiencyConfig(**{**parts, **{key: {**parts[key], **value} if key in parts else value
                                              for key, value in overrides.items()}})
    return dg.RunConfig(ops={name: config for name in PROFICIENCY_ASSETS - {"champion_specialist"}})


# --- whole rounds, in process -----------------------------------------------------------------

@pytest.fixture
def proficiency_resources(tmp_path, storage, specialist_vllm):
    """The resources of a round whose game and meta endpoints are ``server`` and whose specialist is
    served by a vLLM stand-in answering ``server``'s rules."""

    return lambda server: round_resources(tmp_path, storage, server, mlflow_resource(tmp_path),
                                          memory=specialist_vllm(server.rules))
