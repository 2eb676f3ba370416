"""Which specialist is in service, said in MLflow's model registry.

Each trained adapter is a version of ``automem-<family>-specialist`` (``Tracker.log_training``).
When the gate decides on one, its version gets the decision as the tag ``automem.decision``
(with the reason), and a kept one becomes the model's ``champion`` alias, so MLflow's model view
names the specialist in service, as ``assets/specialists/<family>.json`` does.
"""

from __future__ import annotations

from automem_dagster.tracking.mlflow_tracking import Tracker
from automem_dagster.tracking.runs import specialist_model_name

CHAMPION_ALIAS = "champion"
REASON_LIMIT = 5000
"""MLflow keeps tag values up to 5000 characters in its sqlite store; a longer reason is cut there."""


def record_specialist_verdict(tracker: Tracker, family: str, adapter: str, keep: bool, reason: str,
                               outcome: str | None = None) -> str | None:
    """Tag the registered version of ``adapter`` with the decision, and point ``champion`` at it when
    kept. Returns the version, or None when the adapter was never registered (its training not tracked)."""
    model = specialist_model_name(family)
    versions = [v for v in tracker.client.search_model_versions(f"name='{model}'")
                if v.tags.get("automem.adapter") == adapter]
    if not versions:
        return None
    version = max(versions, key=lambda v: int(v.version)).version
    tracker.client.set_model_version_tag(model, version, "automem.decision",
                                         outcome or ("kept" if keep else "rolled_back"))
    tracker.client.set_model_version_tag(model, version, "automem.decision_reason", reason[:REASON_LIMIT])
    if keep:
        tracker.client.set_registered_model_alias(model, CHAMPION_ALIAS, version)
    return version
