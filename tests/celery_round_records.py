"""What the whole-round Celery tests (tests/e2e/test_celery_rounds.py on one host, test_two_hosts.py on two) play
and compare: the scripted game's rules, the round, and the round's merged batches and decision as a one-process
round would have written them."""

import json
from pathlib import Path

IDLE_SLOWLY = [
    {"match": "Phase: LOG", "reply": "<|DONE|>"},
    # Each episode's third action comes slowly, so a shard is still mid-episode when its worker is killed.
    {"match": "Step 3. Your previous action", "reply": "<|ACTION|>noop<|END|>", "delay_s": 2},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"},
]
ROUND = ["rounds", "--game", "crafter", "--rollout-episodes", "2", "--rollout-max-steps", "4", "--eval-episodes", "4",
         "--eval-max-steps", "4", "--max-rounds", "1", "--patience", "1", "--meta", "rules", "--no-tracking"]


def merged_batches(runs: Path) -> dict[str, Path]:
    """The round's batches under ``runs`` by their path there, without their shards."""
    return {str(p.parent.relative_to(runs)): p.parent for p in sorted(runs.rglob("batch.json"))
            if "shards" not in p.parent.relative_to(runs).parts}


def decision(runs: Path) -> dict:
    """The round's decision record, its paths relative to the project home and its clock times left out."""
    [path] = (runs / "decisions" / "crafter").glob("v*.json")
    record = json.loads(path.read_text().replace(str(runs.parent), "<home>"))
    return {k: v for k, v in record.items() if not k.endswith("_at")}


def resumes(batches: dict[str, Path]) -> list[dict]:
    """Every resume the batches' finished episodes record (the step each resumed at)."""
    return [r for batch in batches.values() for t in (batch / "trajectories").glob("*.jsonl")
            for r in json.loads(t.read_text().splitlines()[0]).get("resumes", [])]
