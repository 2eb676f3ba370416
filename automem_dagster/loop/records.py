"""A round's decision and its evidence as flat files, for tools that compare runs by file (DVC).

The CLI's and Dagster's rounds record a decision in the lineage or the specialist registry and
move the champion pointer. A DVC pipeline cannot: those files are inputs of its own stages, so a
stage writing them would make the pipeline stale after every run. Its decide stages therefore
apply the same gate (``decide_paired``, shared by both loops) and write what it found as a flat
record (``dvc metrics``) and tables for ``dvc plots``; promoting a kept version stays a person's
(or the CLI's) act.

A revision the meta-LLM could not produce is an outcome of the round, not a failure: its
evaluation stage leaves a ``rejected.json`` marker instead of a batch, and the record says so. So is
a curated dataset below the minimum, as in the CLI's proficiency round (which stops before training):
curation leaves a ``too_small.json`` marker, training and the specialist's evaluation pass it on
instead of running, and the record says ``dataset_too_small``.
"""

from __future__ import annotations

import json
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.loop.gate import decide_paired, identity_quote, per_seed
from automem_dagster.loop.noise import gate_floors, load_noise
from automem_dagster.loop.storage import Storage
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.metrics.power import detectable_gain
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.summary import load_summary
from automem_dagster.rollout.trajectory import read_manifest

REJECTED = "rejected.json"
"""Written into a candidate's evaluation folder when there was no candidate to evaluate."""
TOO_SMALL = "too_small.json"
"""Written into the curation's, the training's and the specialist evaluation's folders when curation
kept fewer examples than the minimum: nothing was trained, so nothing was played."""
OUTCOMES = {REJECTED: ("rejected", "rejected_reason"), TOO_SMALL: ("dataset_too_small", "too_small_reason")}
"""Each marker's decision outcome and the field of its reason."""

COMPARISON_FIELDS = ("candidate_mean", "champion_mean", "mean_difference", "stderr_difference", "ci_low", "ci_high", "n")


def write_rejected(out: Path, revision_dir: Path) -> dict:
    """Record in ``out`` that the revision in ``revision_dir`` was rejected, so nothing was played."""
    revision = json.loads((Path(revision_dir) / "revision.json").read_text())
    marker = {"rejected_reason": revision["rejected_reason"], "parent_version": revision["parent_version"]}
    write_json_atomic(Path(out) / REJECTED, marker)
    return marker


def write_too_small(out: Path, reason: str) -> dict:
    """Record in ``out`` that curation kept too few examples (``reason``: its message), so nothing follows."""
    marker = {"too_small_reason": reason}
    write_json_atomic(Path(out) / TOO_SMALL, marker)
    return marker


def pass_on_too_small(source: Path, out: Path) -> str | None:
    """When ``source`` (a dataset or adapter folder) holds a too-small marker, write it into ``out`` and
    return its reason: the stage reading ``source`` has nothing to do. None otherwise."""
    marker = Path(source) / TOO_SMALL
    if not marker.exists():
        return None
    return write_too_small(out, json.loads(marker.read_text())["too_small_reason"])["too_small_reason"]


def unplayed(folder: Path) -> tuple[str, str] | None:
    """(outcome, reason) of an evaluation folder holding a marker instead of a batch; None otherwise."""
    for name, (outcome, field) in OUTCOMES.items():
        if (Path(folder) / name).exists():
            return outcome, json.loads((Path(folder) / name).read_text())[field]
    return None


def batch_label(batch_dir: Path) -> str:
    """How a batch is named in records and plots: its scaffold version, ``+ specialist`` for two models."""
    manifest = read_manifest(batch_dir)
    return f"v{manifest['scaffold_version']}" + (" + specialist" if manifest.get("two_model") else "")


def read_evaluation(batch_dir: Path) -> BatchSummary | None:
    """The evaluated batch in ``batch_dir``; None when it holds a marker (``unplayed``) instead.

    Refuses a folder that is neither, naming it: the stage that should have filled it did not finish."""
    folder = Path(batch_dir)
    if unplayed(folder) is not None:
        return None
    if not (folder / "batch.json").exists():
        raise ValueError(f"{folder} holds neither an evaluated batch (batch.json) nor a {' or '.join(OUTCOMES)} "
                         "marker: rerun the evaluation stage that writes it (`dvc repro`)")
    return load_summary(folder)


def decision_record(role: str, challenger_dir: Path, champion_dir: Path, gate: GatePolicy | None = None,
                    storage: Storage | None = None) -> dict:
    """The flat decision record of ``_decide``."""
    return _decide(role, challenger_dir, champion_dir, gate, storage)[0]


def _decide(role: str, challenger_dir: Path, champion_dir: Path, gate: GatePolicy | None = None,
            storage: Storage | None = None) -> tuple[dict, dict[str, BatchSummary]]:
    """Keep or roll back the ``role`` (candidate or specialist) against the champion, as a flat record.

    ``keep`` is 0 or 1 and ``outcome`` one of kept, rolled_back, inconclusive, rejected, dataset_too_small, so
    ``dvc metrics diff`` and ``dvc exp show`` line decisions up across experiments; the comparison
    fields are AutoMem's paired statistics in percent, ``candidate_mean`` being the challenger's
    whatever its role (None when a marker left nothing to compare); ``gate`` and the ``gate_*`` fields
    are the policy, so ``automem adopt`` can check the decision again; ``noise_floor`` is the floor of the
    champion's identity in ``storage`` (default: the project's), None where none was measured. Also
    returns the evaluated batches by label, read once, for the plot tables."""
    challenger, champion = read_evaluation(challenger_dir), read_evaluation(champion_dir)
    if champion is None:
        raise ValueError(f"{champion_dir} holds a marker of nothing played, not the champion's evaluation: "
                         "point --champion at the champion's evaluation folder")
    base = {"role": role, "champion": batch_label(champion_dir)}
    batches = {base["champion"]: champion}
    if challenger is None:
        outcome, why = unplayed(challenger_dir)
        return {**base, "challenger": None, "outcome": outcome, "keep": 0, "reason": f"no {role} to evaluate: {why}",
                **dict.fromkeys(COMPARISON_FIELDS), "detectable_gain": None, "detectable": None,
                "noise_floor": None}, batches
    noise = load_noise(storage or Storage(), champion)  # the floor of the champion's identity (``automem noise``)
    decision = decide_paired(challenger, champion, role, gate, **gate_floors(noise, gate.metric if gate else None))
    comparison = decision.comparison
    label = batch_label(challenger_dir)
    batches[label] = challenger
    detectable = detectable_gain(per_seed(challenger), per_seed(champion), decision.policy)
    return {**base, "challenger": label, "outcome": decision.outcome,
            "keep": int(decision.keep), "reason": decision.reason, **gate_fields(decision.policy),
            "challenger_identity": identity_quote(challenger)["digest"], "champion_identity": identity_quote(champion)["digest"],
            **{name: getattr(comparison, name) for name in COMPARISON_FIELDS},
            "detectable_gain": detectable.smallest_gain, "detectable": detectable.describe(),
            "noise_floor": noise.points if noise else None}, batches


def gate_fields(gate: GatePolicy) -> dict:
    """The policy as flat record fields: ``gate`` (the rule) and ``gate_<setting>`` for the others."""
    return {"gate": gate.rule, **{f"gate_{name}": value for name, value in gate.as_dict().items() if name != "rule"}}


def recorded_gate(record: dict) -> GatePolicy:
    """The policy ``gate_fields`` wrote into ``record``."""
    return GatePolicy(record["gate"], **{name: record[f"gate_{name}"] for name in GatePolicy().as_dict() if name != "rule"})


def progression_rows(batches: dict[str, BatchSummary | None]) -> list[dict]:
    """One row per evaluated agent: mean progression in percent and the mean ± one standard error."""
    rows = []
    for label, summary in batches.items():
        if summary is None or summary.progression is None:
            continue
        p = summary.progression
        rows.append({"agent": label, "progression": p.mean, "progression_low": p.mean - p.stderr,
                     "progression_high": p.mean + p.stderr, "episodes": p.n})
    return rows


def behaviour_rows(batches: dict[str, BatchSummary | None]) -> list[dict]:
    """One row per agent and behaviour rate (unproductive actions, redundant writes, empty searches,
    invalid actions, malformed turns; pooled over the batch's episodes). Rates share one scale, so
    they fit one chart; token and time figures stay in the evaluation's metrics file."""
    rows = []
    for label, summary in batches.items():
        if summary is None or summary.behaviour is None:
            continue
        rows += [{"agent": label, "metric": name, "value": value}
                 for name, value in summary.behaviour.as_dict().items() if name.endswith("_rate")]
    return rows


def loss_rows(training: dict) -> dict[str, list[dict]]:
    """The LoRA run's loss curves from its ``training.json``: ``{"train": rows, "validation": rows}``,
    rows ``{"step", "loss"}``. Two tables, because validation is measured at fewer steps and
    DVC's line plots need every row of a table to hold the plotted field."""
    return {curve: [{"step": int(step), "loss": loss} for step, loss in training.get(f"{curve}_loss", [])]
            for curve in ("train", "validation")}


def write_decision(role: str, challenger_dir: Path, champion_dir: Path, record_path: Path,
                   progression_path: Path, behaviour_path: Path, gate: GatePolicy | None = None,
                   storage: Storage | None = None) -> dict:
    """Decide under ``gate`` (against the noise floor ``storage`` holds for the champion's identity) and write
    the record and both plot tables; returns the record."""
    record, batches = _decide(role, challenger_dir, champion_dir, gate, storage)
    write_json_atomic(progression_path, progression_rows(batches))
    write_json_atomic(behaviour_path, behaviour_rows(batches))
    write_json_atomic(record_path, record)
    return record
