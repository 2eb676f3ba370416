"""What MLflow keeps of a run: its params, metrics and tags and the note its page opens with, the same
keys in every run of a family so the compare view lines the runs up (``mlflow_tracking.Tracker`` logs
them). The round's verdict keeps its earlier MLflow names (``decision_*`` metrics, the ``automem.decision``
tag) so the runs logged before the word was "verdict" still line up with the new ones."""

from __future__ import annotations

import json
import time

from mlflow.entities import Metric, Param, RunTag

from automem_dagster.rollout.identity import flatten
from automem_dagster.tracking.runs import ENDPOINT_FIELDS, EvaluationRun, TrainingRun


def version_tags(run: TrainingRun) -> dict[str, str]:
    """What the adapter's registered version and logged model say of it."""
    return {"automem.adapter": run.adapter, "automem.scaffold_version": str(run.scaffold_version),
            "automem.dataset": run.dataset_hash, "automem.base": run.base}


def training_params(run: TrainingRun) -> list[Param]:
    values = {"game": run.game, "version": run.scaffold_version, "adapter": run.adapter, "base": run.base,
              "settings_source": run.settings_source, "dataset_hash": run.dataset_hash,
              "examples_train": run.examples_train, "examples_validation": run.examples_validation,
              **{f"lora.{k}": ",".join(v) if isinstance(v, list) else v for k, v in run.settings.items()},
              **{f"trained_on.{k}": v for k, v in run.trained_on.items()}}
    return [Param(key, str(value)) for key, value in values.items() if value is not None]


def training_metrics(run: TrainingRun) -> list[Metric]:
    now = int(time.time() * 1000)
    metrics = [Metric("train_loss", float(loss), now, int(step)) for step, loss in run.train_loss]
    metrics += [Metric("validation_loss", float(loss), now, int(step)) for step, loss in run.validation_loss]
    metrics += [Metric(key, float(value), now, 0) for key, value in run.figures.items()]
    return metrics


def training_tags(run: TrainingRun) -> list[RunTag]:
    first, last = run.validation_loss[0][1], run.validation_loss[-1][1]
    note = (f"**{run.game}** LoRA memory specialist {run.adapter} for scaffold v{run.scaffold_version}, base "
            f"`{run.base}`, settings from the {run.settings_source}. {run.examples_train} training and "
            f"{run.examples_validation} validation examples (dataset {run.dataset_hash}); validation loss "
            f"{first:.3f} -> {last:.3f}.")
    unmeasured = int(run.figures.get("curation.kept_unmeasured", 0))
    effects = (f"unmeasured: {unmeasured} kept decisions have no replayed effect (keep_unmeasured)" if unmeasured
               else "measured: every kept decision's effect was replayed")
    values = {"automem.game": run.game, "automem.family": run.family, "automem.version": str(run.scaffold_version),
              "automem.role": "training", "automem.agent": "memory", "automem.adapter": run.adapter,
              "automem.effects": effects, "mlflow.note.content": f"{note} Effects: {effects}."}
    return [RunTag(key, value) for key, value in values.items()]


def evaluation_params(run: EvaluationRun) -> list[Param]:
    values = {
        "version": run.version,
        "parent": run.parent,
        "content_hash": run.content_hash,
        "game": run.game,
        "seeds": ",".join(str(s) for s in run.seeds),
        "n_seeds": len(run.seeds),
        "max_steps": run.max_steps,
        "role": run.role,
        "round_id": run.round_id,
        "agent": run.agent,
        "window": run.window,
        "agent_settings": json.dumps(run.settings, sort_keys=True) if run.settings else None,
        "adapter": run.adapter,
    }
    values["meta_mode"] = (run.diagnosis or {}).get("meta_mode")
    values |= identity_params(run.identity)
    for role, endpoint in sorted(run.endpoints.items()):
        for key in ENDPOINT_FIELDS:
            values[f"endpoint.{role}.{key}"] = endpoint.get(key)
    # A missing value is left out rather than logged as "None", so the compare view shows a blank.
    return [Param(key, str(value)) for key, value in values.items() if value is not None]


def identity_params(identity: dict | None) -> dict:
    """What played the batch, as params: the digest, per role the endpoint's identity, the game's
    package versions (seeds and worlds are in the batch itself)."""
    if not identity:
        return {}
    shown = {"digest": identity.get("digest"), "roles": identity.get("roles", {}), "packages": identity.get("packages", {})}
    return {f"identity.{key}": value for key, value in flatten(shown).items()}


def models_tag(identity: dict | None) -> str | None:
    """``game=model-a,memory=automem-crafter-a1-...``: the models that played, for the runs table."""
    roles = (identity or {}).get("roles") or {}
    return ",".join(f"{role}={facts.get('model')}" for role, facts in sorted(roles.items())) or None


def evaluation_metrics(run: EvaluationRun) -> list[Metric]:
    now = int(time.time() * 1000)
    values = {"progression_mean": run.progression_mean, "progression_se": run.progression_se, **run.behaviour}
    values |= run.retries
    steps = run.behaviour.get("steps")
    if steps is not None:
        values["total_input_tokens"] = run.behaviour["input_tokens_per_step"] * steps
        values["total_output_tokens"] = run.behaviour["output_tokens_per_step"] * steps
    if run.verdict is not None:
        values |= {
            "decision_mean_difference": run.verdict["mean_difference"],
            "decision_stderr": run.verdict["stderr_difference"],
            "decision_ci_low": run.verdict["ci_low"],
            "decision_ci_high": run.verdict["ci_high"],
            "decision_keep": 1.0 if run.verdict["keep"] else 0.0,
        }
    values |= (run.diagnosis or {}).get("metrics", {})
    metrics = [Metric(key, float(value), now, 0) for key, value in values.items()]
    # Step = seed, so MLflow's metric chart draws progression across the seed set.
    metrics += [Metric("progression_seed", float(run.per_seed[seed]), now, int(seed)) for seed in sorted(run.per_seed)]
    return metrics


def evaluation_tags(run: EvaluationRun) -> list[RunTag]:
    values = {
        "automem.game": run.game,
        "automem.family": run.family,
        "automem.version": str(run.version),
        "automem.parent": None if run.parent is None else str(run.parent),
        "automem.role": run.role,
        "automem.agent": run.agent,
        "automem.adapter": run.adapter,
        "automem.meta": run.meta,
        "automem.round": run.round_id,
        "automem.batch": run.batch,
        "automem.identity": (run.identity or {}).get("digest"),
        "automem.models": models_tag(run.identity),
        "automem.decision": run.verdict_tag,
        "mlflow.note.content": evaluation_summary(run),
    }
    return [RunTag(key, value) for key, value in values.items() if value is not None]


def evaluation_summary(run: EvaluationRun) -> str:
    parent = "no parent" if run.parent is None else f"parent v{run.parent}"
    if run.agent == "memory":
        subject = f"**{run.game}** scaffold v{run.version} ({parent}), {run.role}"
        if run.meta:
            subject += f", made by the {run.meta} meta"
        if run.adapter:
            subject += f", memory operations by LoRA specialist {run.adapter}"
    else:
        subject = f"**{run.game}** {run.agent} baseline" + (f" (last {run.window} steps in context)" if run.window else "")
        subject += f", settings {json.dumps(run.settings, sort_keys=True)}" if run.settings else ""
    lines = [
        subject + (f", round {run.round_id}" if run.round_id else ""),
        "",
        f"Progression {run.progression_mean:.1f} ± {run.progression_se:.1f} % over {len(run.seeds)} seeds, "
        f"at most {run.max_steps} steps each.",
    ]
    if run.verdict is not None:
        d = run.verdict
        lines += [
            "",
            f"Verdict: **{run.verdict_tag}**, difference {d['mean_difference']:+.1f} ± {d['stderr_difference']:.1f} points "
            f"(interval {d['ci_low']:+.1f} to {d['ci_high']:+.1f}). {d['reason']}",
        ]
    return "\n".join(lines)
