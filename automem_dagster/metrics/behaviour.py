"""Behaviour metrics computed from trajectories alone.

These are the quantities AutoMem reports moving when memory improves: unproductive
actions (stuck or oscillating), redundant writes, empty searches, invalid actions, and the
cost of each step in tokens, calls and time. Definitions:

* a step is *stuck* when it leaves position, inventory and level as the previous step
  left them, and *oscillating* when its move reverses the previous move (the same rules
  as the derived warnings);
* a write (APPEND, WRITE, UPSERT) is *redundant* when it adds a line already present;
* a search (SEARCH, COUNT) is *empty* when it matches nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from automem_dagster.agent.signals import is_reversal, progress_fingerprint

WRITE_TOKENS = ("<|APPEND|>", "<|WRITE|>", "<|UPSERT|>")
SEARCH_TOKENS = ("<|SEARCH|>", "<|COUNT|>")


@dataclass(frozen=True)
class BehaviourMetrics:
    steps: int
    unproductive_action_rate: float
    redundant_write_rate: float
    empty_search_rate: float
    invalid_action_rate: float
    malformed_turn_rate: float
    model_calls_per_step: float
    input_tokens_per_step: float
    output_tokens_per_step: float
    wall_s_per_step: float
    model_s_per_step: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def behaviour_metrics(episodes: list[list[dict]]) -> BehaviourMetrics:
    """``episodes`` are lists of step records (as in trajectory files), pooled over episodes."""
    steps = unproductive = invalid = writes = redundant = searches = empty = 0
    turns = malformed = tokens_in = tokens_out = 0
    wall = model_s = 0.0
    for records in episodes:
        previous = None
        for rec in records:
            steps += 1
            if previous is not None:
                stuck = progress_fingerprint(rec["state"]) == progress_fingerprint(previous["state"])
                unproductive += stuck or is_reversal(previous["action"], rec["action"])
            invalid += not rec["action_valid"]
            wall += rec["wall_s"]
            for turn in rec["turns"]:
                turns += 1
                malformed += bool(turn["errors"])
                tokens_in += turn["input_tokens"]
                tokens_out += turn["output_tokens"]
                model_s += turn["latency_s"]
                for op in turn["ops"]:
                    if op["op"].startswith(WRITE_TOKENS) and op["ok"]:
                        writes += 1
                        redundant += op["redundant"]
                    elif op["op"].startswith(SEARCH_TOKENS) and op["ok"]:
                        searches += 1
                        empty += op["empty"]
            previous = rec
    return BehaviourMetrics(
        steps=steps,
        unproductive_action_rate=_rate(unproductive, max(steps - len(episodes), 0)),
        redundant_write_rate=_rate(redundant, writes),
        empty_search_rate=_rate(empty, searches),
        invalid_action_rate=_rate(invalid, steps),
        malformed_turn_rate=_rate(malformed, turns),
        model_calls_per_step=_rate(turns, steps),
        input_tokens_per_step=_rate(tokens_in, steps),
        output_tokens_per_step=_rate(tokens_out, steps),
        wall_s_per_step=wall / steps if steps else 0.0,
        model_s_per_step=model_s / steps if steps else 0.0,
    )
