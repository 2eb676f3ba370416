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


READ_TOKENS = ("<|READ|>", "<|TAIL|>", "<|SEARCH|>", "<|COUNT|>")
GUARDS = ("valid_action_rate", "reads_per_step", "writes_per_step")
"""What a cheaper scaffold may not give up to be kept at an equal score (``metrics.verdict``, equal_score):
valid actions, and reading and writing its memory at all."""


def uncached_tokens(turn: dict) -> int:
    """Input tokens the server processed anew for one call: all of them when it did not say what it
    cached, or when the call was retried (a retry finds its own first attempt's prompt cached)."""
    cached = turn.get("cached_tokens")
    return turn["input_tokens"] - (cached if cached is not None and turn.get("attempts", 1) == 1 else 0)


def op_counts(steps: list[dict]) -> dict[str, int]:
    """Successful memory operations of an episode: ``reads`` (READ, TAIL, SEARCH, COUNT), ``writes``
    (APPEND, WRITE, UPSERT) and ``searches`` (SEARCH, COUNT)."""
    counts = dict.fromkeys(("reads", "writes", "searches"), 0)
    for op in (op for rec in steps for turn in rec["turns"] for op in turn["ops"] if op["ok"]):
        counts["reads"] += op["op"].startswith(READ_TOKENS)
        counts["writes"] += op["op"].startswith(WRITE_TOKENS)
        counts["searches"] += op["op"].startswith(SEARCH_TOKENS)
    return counts


def gate_reading(steps: list[dict], metric: str) -> float | None:
    """The equal_score gate's reading of ``metric`` on one episode: None where the rate has no denominator
    (no write for ``redundant_write_rate``, no search for ``empty_search_rate``, fewer than 2 steps for
    ``unproductive_action_rate``), so the seed is excluded rather than read as a perfect 0; input tokens
    are counted uncached (``uncached_tokens``), since a prompt-cache hit costs the server almost nothing
    and counting it would read fewer, longer calls as a saving."""
    if not steps:
        return None
    if metric == "input_tokens_per_step":
        return sum(uncached_tokens(t) for rec in steps for t in rec["turns"]) / len(steps)
    counts = op_counts(steps)
    whole = {"redundant_write_rate": counts["writes"], "empty_search_rate": counts["searches"],
             "unproductive_action_rate": len(steps) - 1}.get(metric, 1)
    return behaviour_metrics([steps]).as_dict()[metric] if whole else None


def guard_readings(episodes: list[list[dict]]) -> dict[str, float]:
    """``GUARDS`` pooled over ``episodes``: the share of valid actions, memory reads and writes per step."""
    steps = [rec for records in episodes for rec in records]
    counts = op_counts(steps)
    n = max(len(steps), 1)
    return {"valid_action_rate": sum(rec["action_valid"] for rec in steps) / n,
            "reads_per_step": counts["reads"] / n, "writes_per_step": counts["writes"] / n}
