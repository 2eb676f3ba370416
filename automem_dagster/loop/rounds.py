"""Structure rounds back to back, as Dagster's ``next_round_sensor`` chains them, from one command.

The paper runs the structure loop "until the validation set saturates". Here that is: rounds from the
champion, one after another, until ``patience`` consecutive rounds keep nothing (a tie, a loss or a rejected
revision) or ``max_rounds`` rounds ran (``settings.RoundsPlan``, whose defaults the CLI shows). ``patience=1``
is exactly the sensor's chain (the next round starts only after a keep). Each round is the ordinary round (the
CLI's, a Dagster run, through whatever ``play`` the caller gives), on a fresh block of training seeds
(``seed_blocks.next_block``, given the block played last): a round that registered no candidate does not
advance the lineage, so without it the next round would diagnose the same episodes again and, with the
deterministic rules meta, reach the same verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from automem_dagster.loop.seed_blocks import next_block
from automem_dagster.loop.settings import RoundsPlan, StructureConfig
from automem_dagster.loop.storage import Storage
from automem_dagster.loop.structure import RoundResult


@dataclass
class RoundsResult:
    """Every round played (with the training-seed block each diagnosed) and why the rounds stopped."""

    rounds: list[RoundResult] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    stopped: str = ""

    @property
    def kept(self) -> int:
        return sum(r.outcome == "kept" for r in self.rounds)


def run_rounds(settings: StructureConfig, plan: RoundsPlan, play: Callable[[StructureConfig], RoundResult],
               storage: Storage, say: Callable[[str], None] = lambda line: None) -> RoundsResult:
    """Play rounds with ``play`` (the CLI's round) until ``plan`` says stop; see the module docstring."""
    result, idle = RoundsResult(), 0
    for number in range(1, plan.max_rounds + 1):
        block = next_block("structure", settings.game, storage, result.blocks[-1] if result.blocks else None)
        say(f"round {number} of at most {plan.max_rounds} (training-seed block {block})")
        played = play(settings.model_copy(update={"seed_block": block}))
        result.rounds.append(played)
        result.blocks.append(block)
        idle = 0 if played.outcome == "kept" else idle + 1
        if idle >= plan.patience:
            result.stopped = f"{idle} round(s) in a row kept nothing (patience {plan.patience})"
            return result
    result.stopped = f"{plan.max_rounds} rounds ran (--max-rounds)"
    return result
