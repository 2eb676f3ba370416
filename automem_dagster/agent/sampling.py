"""Per-request sampling seeds: the same (episode seed, step, phase, turn) always gets the same seed.

Fixing the environment's seed alone leaves the model's sampling free, so a rerun at temperature
above 0 plays another episode. Every request therefore carries a seed derived from where it
falls in the episode: on servers that honour seeds (llama.cpp; vLLM only when started with
``VLLM_BATCH_INVARIANT=1``; OpenAI best effort; Anthropic ignores them) a rerun is identical,
and a candidate and its champion meet the same sampling noise at the same point (common random
numbers, which narrows their paired comparison). The derivation is a SHA-256 of
the four parts, not Python's ``hash()``, which is salted per process.
"""

from __future__ import annotations

import hashlib
from typing import Any

from automem_dagster.llm.server_rules import ignored_fields

SEED_BITS = 31
"""Seeds stay below 2**31: llama.cpp and vLLM take a signed 32-bit or 64-bit seed, OpenAI an int."""


def request_seed(episode_seed: int, step: int, phase: str, turn: int) -> int:
    """The sampling seed of the ``turn``-th request of ``phase`` at ``step`` of the episode played on ``episode_seed``."""
    digest = hashlib.sha256(f"{episode_seed}|{step}|{phase}|{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (1 << SEED_BITS)


_SERVERS_WORD = {
    "llama.cpp": "honoured: llama.cpp's server samples from the request's seed",
    "vllm": "reproducible only on a vLLM started with VLLM_BATCH_INVARIANT=1: otherwise concurrent requests are "
            "batched together and the batch changes the logits, greedy decoding included (vLLM's reproducibility "
            "docs), so a rerun may differ; docs/vllm.md",
    "openai-compatible": "best effort: an OpenAI-style API treats the seed as a hint (compare system_fingerprint); "
                         "a rerun may differ",
}


def seed_support(config: Any) -> str:
    """What the endpoint does with per-request seeds, in the server's own terms, for the records.

    ``config`` is an ``EndpointConfig``; its ``server`` names the server family (llama.cpp, vLLM,
    or any other OpenAI-compatible API, typically a hosted one). The integration test
    ``test_memory_agent_rerun_at_temperature_is_identical`` is the rerun check for the embedded
    server; for a remote server, rerun one short batch into a second folder and compare.
    """
    if config.server == "vllm":
        return ("honoured: the endpoints file declares the vLLM server batch-invariant (VLLM_BATCH_INVARIANT=1)"
                if config.batch_invariant else _SERVERS_WORD["vllm"])
    if config.temperature == 0:
        return "not needed: temperature 0 samples greedily"
    if "seed" in ignored_fields(config):
        return "ignored: the provider accepts seed and ignores it (llm/config.py IGNORED_FIELDS); a rerun differs"
    if config.seed is not None:
        return f"fixed by the endpoint file: every request uses seed {config.seed} (no per-position seeds)"
    if config.embedded and config.server == "llama.cpp":
        return (_SERVERS_WORD["llama.cpp"] + "; the embedded server takes one request at a time and reuses a slot's "
                "cached prompt only within its episode, so a rerun is identical at any concurrency (llm/slot_turns.py)")
    if config.server == "llama.cpp" and config.cache_prompt:
        return (_SERVERS_WORD["llama.cpp"] + ", but with cache_prompt on its logits over a cached prefix may differ in "
                "the last bits (llama.cpp's README), so a rerun can part where two tokens nearly tie; "
                "cache_prompt: false makes reruns identical")
    return _SERVERS_WORD[config.server]


def sampling_record(clients: Any) -> dict[str, str]:
    """Per role that plays (game, memory), how its requests are seeded: batch.json keeps it and the
    keep-or-rollback decision quotes it, so a reader knows whether a rerun would replay the batch."""
    return {role: seed_support(client.config)
            for role in ("game", "memory") if (client := getattr(clients, role, None)) is not None}
