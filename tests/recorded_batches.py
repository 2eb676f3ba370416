"""A batch folder whose ``batch.json`` records an identity with given roles, and its summary, for the
checks that a batch stands for what played it (``rollout/identity.py``)."""

import json

from automem_dagster.rollout import BatchSummary, EpisodeSummary


def recorded(folder, roles: dict) -> BatchSummary:
    """A batch in ``folder`` whose batch.json records an identity with ``roles`` (seeds 42, 43)."""
    folder.mkdir()
    identity = {"game": "crafter", "seeds": [42, 43], "scaffold_hash": "s", "roles": roles, "worlds": {"42": "w"}}
    identity = {**identity, "digest": folder.name}
    (folder / "batch.json").write_text(json.dumps({"game": "crafter", "identity": identity}))
    episodes = [EpisodeSummary(f"crafter__seed{s}", s, 4, p, 0.0, 1.0, 4) for s, p in ((42, 0.2), (43, 0.1))]
    return BatchSummary(str(folder), "crafter", episodes, None, None, identity=identity)
