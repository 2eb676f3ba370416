"""What the DVC pipeline's stages leave in their folders besides batches: markers of what was not played,
and the flat export of a round's decision for tools that compare runs by file (``dvc metrics``, ``dvc plots``).

The DVC round decides as the CLI's and Dagster's rounds do (``loop/dvc_round.py``: ``judge_challenger``
on the lineage or the specialist registry); the record its decide stage writes under ``outputs/decide``
is that one ``VerdictRecord`` flattened (``flat_verdict``), with no gating of its own.

A round that has nothing to play is an outcome, not a failure, and a marker file in a stage's folder
says which: ``rejected.json`` (the meta-LLM made no valid revision: the candidate's evaluation played
nothing), ``too_small.json`` (curation kept fewer examples than the minimum: nothing was trained or
played), ``resumed.json`` (the round resumes an earlier round's pending challenger: its rollout played
nothing, and the stages up to the challenger's evaluation pass the marker on).
"""

from __future__ import annotations

import json
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.loop.challenger import VerdictRecord
from automem_dagster.meta.revise import REVISION_FILE
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.summary import load_summary
from automem_dagster.rollout.trajectory import BATCH_FILE, read_manifest

REJECTED = "rejected.json"
"""Written into a candidate's evaluation folder when there was no candidate to evaluate."""
TOO_SMALL = "too_small.json"
"""Written into the curation's, the training's and the specialist evaluation's folders when curation
kept fewer examples than the minimum: nothing was trained, so nothing was played."""
RESUMED = "resumed.json"
"""Written into a rollout folder when the round resumes a pending challenger (``{"role", "challenger"}``),
and passed on by the stages that would have made a new one."""
CHAMPION = "champion.json"
"""Written into the champion folder of a challenger's evaluation (``evaluate --beside-champion``), which holds
the champion's arms played beside it (``evaluation.champion_arms``): ``{"batch": <arm folder>}``, the arm the
decision pairs with the challenger (``evaluation.round_champion``)."""
OUTCOMES = {REJECTED: ("rejected", "rejected_reason"), TOO_SMALL: ("dataset_too_small", "too_small_reason")}
"""Each marker of nothing played and its decision outcome and the field of its reason."""

COMPARISON_FIELDS = ("candidate_mean", "champion_mean", "mean_difference", "stderr_difference", "ci_low", "ci_high", "n")


def write_rejected(out: Path, revision_dir: Path) -> dict:
    """Record in ``out`` that the revision in ``revision_dir`` was rejected, so nothing was played."""
    revision = json.loads((Path(revision_dir) / REVISION_FILE).read_text())
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


def write_resumed(out: Path, role: str, challenger: int | str) -> dict:
    """Record in ``out`` that the round resumes the pending ``role`` ``challenger``."""
    marker = {"role": role, "challenger": challenger}
    write_json_atomic(Path(out) / RESUMED, marker)
    return marker


def resumed(folder: Path) -> dict | None:
    """The resumed marker in ``folder`` (``{"role", "challenger"}``); None when the round made its own."""
    marker = Path(folder) / RESUMED
    return json.loads(marker.read_text()) if marker.exists() else None


def pass_on_resumed(source: Path, out: Path) -> dict | None:
    """When ``source`` holds a resumed marker, write it into ``out`` and return it: the stage reading
    ``source`` makes no new challenger. None otherwise."""
    data = resumed(source)
    return write_resumed(out, data["role"], data["challenger"]) if data is not None else None


def write_round_champion(folder: Path, champion: BatchSummary) -> None:
    """Record in ``folder`` (``CHAMPION``) which of the arms played there is the round's champion batch."""
    write_json_atomic(Path(folder) / CHAMPION, {"batch": Path(champion.out_dir).name})


def round_champion_dir(folder: Path) -> Path:
    """The batch folder of the round's champion batch in a champion folder (``CHAMPION``); ``folder`` itself
    when it holds no such record (a marker of nothing played, or one batch)."""
    record = Path(folder) / CHAMPION
    return Path(folder) / json.loads(record.read_text())["batch"] if record.exists() else Path(folder)


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
    if not (folder / BATCH_FILE).exists():
        raise ValueError(f"{folder} holds neither an evaluated batch (batch.json) nor a {' or '.join(OUTCOMES)} "
                         "marker: rerun the evaluation stage that writes it (`dvc repro`)")
    return load_summary(folder)


def flat_verdict(record: VerdictRecord, labels: tuple[str, str]) -> dict:
    """``record`` as one flat JSON object (``labels``: the challenger's and the champion's batch labels):
    ``keep`` 0 or 1 and ``outcome`` so ``dvc metrics diff`` and ``dvc exp show`` line decisions up across
    experiments; the comparison in percent (``candidate_mean`` is the challenger's whatever its role);
    ``gate`` and ``gate_<setting>`` the policy; the identities, the smallest detectable gain and the noise floor."""
    gate = dict(record.gate)
    return {"role": record.role, "challenger": labels[0], "champion": labels[1], "challenger_id": record.challenger,
            "champion_before": record.champion_before, "champion_after": record.champion_after,
            "outcome": record.outcome, "keep": int(record.keep), "reason": record.reason,
            "gate": gate.pop("rule", None), **{f"gate_{name}": value for name, value in gate.items()},
            "challenger_identity": record.identity.get(record.role, {}).get("digest"),
            "champion_identity": record.identity.get("champion", {}).get("digest"),
            **{name: record.comparison.get(name) for name in COMPARISON_FIELDS},
            "detectable_gain": record.detectable.get("smallest_gain"), "detectable": record.detectable.get("summary"),
            "noise_floor": record.noise.get("floor")}


def unplayed_verdict(role: str, champion: str | None, outcome: str, why: str) -> dict:
    """The flat record of a round that had no challenger to decide (a marker's ``outcome`` and reason); no
    ``champion`` label where nothing was played beside it either (``evaluate --beside-champion``)."""
    return {"role": role, "challenger": None, "champion": champion, "challenger_id": None, "outcome": outcome,
            "keep": 0, "reason": f"no {role} to evaluate: {why}", **dict.fromkeys(COMPARISON_FIELDS),
            "detectable_gain": None, "detectable": None, "noise_floor": None}


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


def write_exports(paths: tuple[Path, Path, Path], flat: dict, batches: dict[str, BatchSummary | None]) -> None:
    """The flat record and both plot tables, into ``paths`` (record, progression, behaviour)."""
    record_path, progression_path, behaviour_path = paths
    write_json_atomic(progression_path, progression_rows(batches))
    write_json_atomic(behaviour_path, behaviour_rows(batches))
    write_json_atomic(record_path, flat)
