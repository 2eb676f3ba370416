"""The known-answer learning check on key and door (issue 53, point 6): datasets of memory decisions
built from the game's own prompts, trained by the proficiency loop's training stage, served and
measured the way the loop serves and a user measures a specialist.

The memory model's one useful decision in key and door is noting the key's wing when the sign shows
it (step 1: the sign is the first observation after the start, and its LOG the episode's first, so
the memory is still empty and the prompt depends on the wing alone). ``positive`` decisions make that
note; ``junk`` decisions, as many, on the same prompts, note something the door never needs. Both are
trained with the same settings and steps; the rate is ``meta.fact_notes`` on held-out evaluation
seeds played by the two-model agent with the rule actor (``assets/endpoints/embedded-rule-actor.yaml``).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pandas as pd

from automem_dagster.agent import prompts
from automem_dagster.commands.shared import play_as
from automem_dagster.games import make_game
from automem_dagster.loop.proficiency import exported_adapter, train_into
from automem_dagster.loop.settings import ProficiencyConfig, Training
from automem_dagster.memory import MemoryStore
from automem_dagster.meta.curate import CurationResult
from automem_dagster.meta.fact_notes import FactRate, batch_fact_rate, fact_horizon
from automem_dagster.meta.lora_config import LoraChoice
from automem_dagster.paths import ASSETS, SCAFFOLDS
from automem_dagster.rollout import RolloutSpec
from automem_dagster.scaffold import Scaffold, load_scaffold
from automem_dagster.training.settings import LoraSettings

GAME = "keydoor"
ENDPOINTS = ASSETS / "endpoints" / "embedded-rule-actor.yaml"
SIGN_STEP = 1
"""The sign is the observation after the first step (``games/keydoor.py``: the hall's first position)."""
WALK = "forward"
POSITIVE = ("key: {WING} wing", "The key lies in the {WING} wing.", "sign: key in the {WING} wing")
JUNK = ("The sign crumbled to dust.", "hallway: long, the door far ahead", "walked on along the hallway")
"""Notes at the sign that the door never needs: none names a wing."""
SETTINGS = LoraSettings(rank=8, alpha=16, dropout=0.0, learning_rate=1e-3, epochs=1, batch_size=2,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], max_length=512, warmup_ratio=0.0,
                        lr_scheduler="constant")
"""Small and fast, as the SFT tests train (``sft_examples.TINY``), with room for the ~270-token prompt; batch 2,
since the check needs 12 updates, not 12 x 4 decisions (``test_learning_known_answer.STEPS``)."""


def free_v0() -> Scaffold:
    """Key and door's v0 with the LOG turn free to write nothing (the default limits), as v0 was when this
    check was measured: the base model then ends the sign's LOG at once (0 notes of the wing), so a rise in
    the rate is training's. The shipped v0 makes every LOG write one line (``assets/scaffolds/keydoor/v0.yaml``),
    and its base model copies the sign now and then, which would only blur the comparison this check makes."""
    v0 = load_scaffold(GAME, 0, SCAFFOLDS)
    return v0.model_copy(update={"limits": type(v0.limits)()})


def sign_messages(scaffold: Scaffold, seed: int) -> list[dict]:
    """The memory model's LOG prompt at the sign on ``seed``, built as the two-model agent builds it
    (``prompts.phase_messages`` with the memory role's system prompt, the store as the scaffold creates it)."""
    game = make_game(GAME)
    game.reset(seed)
    sign = game.step(WALK).observation
    with tempfile.TemporaryDirectory() as root:
        store = MemoryStore(Path(root) / "files")
        for f in scaffold.files:
            store.init_file(f.name, f.initial, f.policy)
        index = store.index()
    system = prompts.system_prompt(scaffold, game.actions(), "memory")
    context = prompts.StepContext(SIGN_STEP, sign, index, [(WALK, 0.0)], [], prompts.LOG_PHASE)
    return prompts.phase_messages(system, scaffold, context)


def decision_rows(kind: str, scaffold: Scaffold, seeds: list[int]) -> list[dict]:
    """One LOG decision per seed at its sign: ``positive`` notes the key's wing, ``junk`` something irrelevant."""
    rows = []
    for k, seed in enumerate(seeds):
        game = make_game(GAME)
        game.reset(seed)
        wing = game.needed_facts()[0].answer.upper()
        note = (POSITIVE if kind == "positive" else JUNK)[k % 3].format(WING=wing)
        rows.append({"prompt": sign_messages(scaffold, seed),
                     "completion": [{"role": "assistant", "content": f"<|APPEND|>notes.txt|{note}\n<|DONE|>"}],
                     "episode": f"keydoor__seed{seed}", "seed": seed, "step": SIGN_STEP, "phase": "log", "turn": 0,
                     "score": 1.0 if kind == "positive" else 0.0})
    return rows


def train_specialist(kind: str, scaffold: Scaffold, seeds: list[int], out: Path, steps: int):
    """Train a specialist on ``kind`` decisions with the proficiency loop's training stage (``train_into``:
    the trainer in its own process, then the GGUF export) and return it as the record the loop serves."""
    data = out / f"{kind}-dataset"
    data.mkdir(parents=True)
    rows = decision_rows(kind, scaffold, seeds)
    pd.DataFrame(rows).to_parquet(data / "dataset.parquet")
    choice = LoraChoice(SETTINGS, "given", "the known-answer learning check's settings", SETTINGS)
    settings = ProficiencyConfig(training=Training(base="embedded", max_train_steps=steps, eval_every=steps)).for_game(GAME)
    folder = out / f"{kind}-adapter"
    result, _ = train_into(CurationResult(str(data), len(rows), {}), choice, settings, folder)
    choice.save(folder / "lora_config.json")
    return exported_adapter(folder, scaffold.version), result


def play_to_the_sign(scaffold: Scaffold, seeds: list[int], out: Path, adapter=None) -> FactRate:
    """Play ``seeds`` until the sign's LOG with the base memory model (``adapter`` None) or a specialist,
    served as the proficiency loop serves it (``play_as``: ``serving.specialist_endpoints``), and read the
    rate of notes of the wing."""
    spec = RolloutSpec(GAME, scaffold, seeds, fact_horizon(GAME, seeds), out, concurrency=2, fixed_dir=True)
    asyncio.run(play_as(spec, ENDPOINTS, adapter, out.parent / "logs"))
    return batch_fact_rate(out)
