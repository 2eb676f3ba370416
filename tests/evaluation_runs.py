"""``EvaluationRun`` records as the evaluation stage builds them (behaviour, retries, endpoints with a
key a careless caller might add), for the Tracker tests."""

from automem_dagster.tracking import EvaluationRun

BEHAVIOUR = {
    "steps": 200,
    "unproductive_action_rate": 0.25,
    "redundant_write_rate": 0.1,
    "empty_search_rate": 0.5,
    "invalid_action_rate": 0.05,
    "malformed_turn_rate": 0.02,
    "model_calls_per_step": 2.0,
    "input_tokens_per_step": 1500.0,
    "output_tokens_per_step": 40.0,
    "wall_s_per_step": 0.8,
    "model_s_per_step": 0.7,
}

RETRIES = {"attempts": 230.0, "retries": 30.0, "retries_http_429": 10.0, "retries_timeout": 20.0, "retry_s": 41.5,
           "model_s": 12.0}


def endpoints(api_key: str) -> dict:
    """A describe()-shaped dict, plus an api_key field a careless caller might add."""
    return {
        "game": {"name": "game", "base_url": "http://127.0.0.1:8080/v1", "model": "smollm2", "temperature": 0.7,
                 "constrained": True, "lora_id": None, "api_key": api_key},
        "meta": {"name": "meta", "base_url": "https://api.example.com/v1", "model": "big", "temperature": 0.0,
                 "constrained": False, "lora_id": None, "api_key": api_key},
    }


def evaluation(version: int, family: str = "crafter", **overrides) -> EvaluationRun:
    fields = {
        "game": "crafter" if family == "crafter" else f"{family}:Corridor-R3",
        "family": family,
        "version": version,
        "parent": version - 1 if version else None,
        "content_hash": f"hash{version}",
        "role": "candidate" if version else "champion",
        "round_id": "2026-W48" if version else None,
        "seeds": [42, 43, 44],
        "max_steps": 100,
        "endpoints": endpoints("unused"),
        "progression_mean": 10.0 + version,
        "progression_se": 2.0,
        "per_seed": {42: 4.5, 43: 9.0, 44: 13.5 + version},
        "behaviour": BEHAVIOUR,
        "retries": RETRIES,
        "scaffold_yaml": f"version: {version}\n",
    }
    return EvaluationRun(**(fields | overrides))
