"""Which training seeds a round plays: the seed-block rule of both loops, written once.

A round plays one block of ``episodes`` training seeds from its loop's stream: block ``b`` is
items ``base + b * episodes ..`` of the game's fixed shuffle (``rollout.seeds.training_seeds``),
the structure loop's diagnosis in the first half, the proficiency loop's training rollouts in the
second (``PROFICIENCY_SEED_OFFSET``), so neither replays the other's episodes. ``seed_block`` is the
rule: one block per challenger the loop registered so far (scaffold versions after the first, in the
lineage; adapters, in the specialist registry), so each round that registers one moves to fresh
episodes; rounds back to back pass the block they played last, so a round that registered nothing
still moves on. The CLI round, the Dagster assets (through ``start_round`` and
``start_proficiency_round``) and the DVC rollout stage (``automem rollout --training``) all ask
``round_seeds``, so changing ``seed_block`` changes all three.
"""

from __future__ import annotations

from typing import Literal

from automem_dagster.games import game_family
from automem_dagster.loop.storage import Storage
from automem_dagster.rollout.seeds import assert_disjoint, eval_seeds, training_seeds
from automem_dagster.training.registry import SpecialistRegistry

Loop = Literal["structure", "proficiency"]

PROFICIENCY_SEED_OFFSET = 49_500
"""Proficiency rollouts take their training seeds from the second half of the game's shuffled
training stream, so they never replay the structure loop's diagnosis episodes (first half)."""

STREAM_START: dict[str, int] = {"structure": 0, "proficiency": PROFICIENCY_SEED_OFFSET}


def seed_block(registered: int, previous: int | None = None) -> int:
    """The block a round plays: ``registered`` (challengers the loop registered so far), or the one
    after ``previous`` (the block the last round of a series played) when that round registered nothing."""
    return registered if previous is None or registered > previous else previous + 1


def registered_challengers(loop: Loop, family: str, storage: Storage) -> int:
    """How many challengers ``loop`` registered for ``family``: scaffold versions after the first
    (the lineage numbers them), or trained adapters (the specialist registry lists them)."""
    if loop == "structure":
        return storage.load_lineage(family).next_version() - 1
    return len(SpecialistRegistry.load(family, storage.specialists).adapters)


def next_block(loop: Loop, game: str, storage: Storage, previous: int | None = None) -> int:
    """``seed_block`` of what ``loop`` registered for ``game``'s family so far."""
    return seed_block(registered_challengers(loop, game_family(game), storage), previous)


def round_seeds(loop: Loop, game: str, episodes: int, storage: Storage, block: int | None = None) -> list[int]:
    """The training seeds of ``loop``'s round: ``block`` (a block chosen by the caller), else
    ``next_block``; refused if any is an evaluation seed."""
    block = next_block(loop, game, storage) if block is None else block
    seeds = training_seeds(game, episodes, STREAM_START[loop] + block * episodes, storage.seeds_file)
    assert_disjoint(seeds, eval_seeds(game, storage.seeds_file))
    return seeds
