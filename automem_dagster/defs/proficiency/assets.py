"""The proficiency loop's assets, each one stage of ``automem_dagster.loop.proficiency``.

``training_rollouts`` -> ``sft_dataset`` -> ``lora_config`` -> ``lora_adapter`` ->
``specialist_evaluation`` (with the ``specialist_gate`` check) -> ``champion_specialist``.
Values passed between them are paths and small dicts; everything else is read back from the
files the stages wrote. An adapter trained but not yet decided is resumed: the next round
skips rollouts, curation and configuration and evaluates it instead of training another.
"""

import json
from dataclasses import asdict
from pathlib import Path

import dagster as dg

from automem_dagster.defs.common.config import ROLLOUT_RETRY
from automem_dagster.defs.common.gate import decide_once, log_run_links
from automem_dagster.defs.common.metadata import rollout_metadata
from automem_dagster.defs.common.partitions import game_of, game_partitions
from automem_dagster.defs.common.proficiency_metadata import (
    adapter_metadata,
    curation_metadata,
    dataset_metadata,
    lora_config_metadata,
    specialist_decision_metadata,
    specialist_evaluation_metadata,
)
from automem_dagster.defs.common.progress import episode_log
from automem_dagster.defs.common.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.defs.common.versions import versioned_output

# specialist_evaluation sits in the evaluation group beside candidate_evaluation: both play a
# challenger against the one-model champion on the fixed seeds.
from automem_dagster.defs.evaluation.assets import GROUP as EVALUATION_GROUP
from automem_dagster.defs.evaluation.assets import TAGS as EVALUATION_TAGS
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.games import game_family
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.proficiency import (
    curate_stage,
    curated,
    dataset_dir,
    decide_specialist_stage,
    load_specialist_decision,
    lora_config_stage,
    registry,
    specialist_evaluation_stage,
    start_proficiency_round,
    train_stage,
    training_record,
    training_rollout_stage,
)
from automem_dagster.loop.report import report_dir, report_specialist, report_training
from automem_dagster.loop.serving import serving_rank_limit, specialist_endpoints
from automem_dagster.meta.curate import DatasetTooSmall
from automem_dagster.meta.lora_config import LoraChoice
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout import load_summary
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold

GROUP = "proficiency"
TAGS = {"domain": "proficiency"}



def _training_log(log):
    """A trainer ``progress(step, total, logs)`` callback that logs each logged step."""

    def progress(step: int, total: int, logs: dict[str, float]) -> None:
        figures = ", ".join(f"{k} {v:.4g}" for k, v in logs.items() if isinstance(v, int | float))
        log.info(f"training step {step}/{total}: {figures}")

    return progress


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "llm"}, tags=TAGS,
          retry_policy=ROLLOUT_RETRY, deps=[dg.AssetDep("champion_scaffold")])
def training_rollouts(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                      storage: StorageResource) -> dg.Output:
    """The champion scaffold played by the one-model agent on fresh training seeds (disjoint from
    the evaluation seeds and from the structure loop's diagnosis seeds): the memory decisions the
    specialist learns from. The value is the batch directory. It depends on ``champion_scaffold``:
    a new champion (a new data version, its content hash) makes this round's specialist stale.

    Skipped (value None) while an earlier round's adapter still waits for its decision: this round
    then evaluates that adapter instead of training a new one."""
    settings = config.settings(game_of(context.partition_key))
    store = storage.storage()
    start = start_proficiency_round(settings, store)
    if start.resumes:
        reason = f"adapter {start.pending.id} of an earlier round is pending: this round evaluates it, no new rollouts"
        context.log.info(reason)
        return dg.Output(None, metadata={"outcome": "skipped", "reason": reason})
    champion, seeds = start.scaffold, start.seeds
    context.log.info(f"champion v{champion.version} on training seeds {seeds}, {settings.budget.rollout_max_steps} "
                     "steps each")
    summary = endpoints.run(lambda clients: training_rollout_stage(settings, champion, seeds, clients, store,
                                                                   episode_log(context.log)), store.runs / "logs")
    context.log.info(f"progression {summary.progression}: {summary.out_dir}")
    return dg.Output(summary.out_dir, metadata=rollout_metadata(summary, champion.version, seeds))


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "llm", "parquet"}, tags=TAGS)
def sft_dataset(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                storage: StorageResource, training_rollouts: str | None) -> dg.Output:
    """The specialist's SFT dataset, curated from the training rollouts: each memory decision scored
    by what followed it, borderline ones reviewed by the meta-LLM, duplicates and over-represented
    episodes removed, evaluation seeds never included. Its content hash is the dataset's version.
    Below ``min_examples`` the run stops here (nothing is trained); the audit files stay for reading.
    A batch already curated is read back. The value is the dataset directory and its scaffold version."""
    if training_rollouts is None:
        context.log.info("no rollouts this round (a pending adapter is resumed): nothing to curate")
        return dg.Output(None, metadata={"outcome": "skipped"})
    settings = config.settings(game_of(context.partition_key))
    store = storage.storage()
    batch = Path(training_rollouts)
    version = read_manifest(batch)["scaffold_version"]
    scaffold = load_scaffold(settings.family, version, store.scaffolds)
    context.log.info(f"curating {batch} (scaffold v{version}), at least {settings.curation.min_examples} examples")
    try:
        data = endpoints.run(lambda clients: curate_stage(batch, scaffold, settings, clients.meta, store, context.log.info),
                             store.runs / "logs")
    except DatasetTooSmall as exc:
        context.log.error(str(exc))
        out = dataset_dir(store, batch)
        stats = json.loads((out / "stats.json").read_text()) if (out / "stats.json").exists() else None
        raise dg.Failure(description=str(exc), metadata=curation_metadata(stats, out) if stats else None) from exc
    stats = data.stats
    context.log.info(f"{data.examples} examples from {stats['kept_decisions']} decisions, version "
                     f"{stats['dataset_hash']}: {data.out_dir}")
    return versioned_output({"dataset_dir": data.out_dir, "scaffold_version": version},
                            dataset_metadata(stats, Path(data.out_dir), version), dg.DataVersion(stats["dataset_hash"]))


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "llm", "json"}, tags=TAGS)
def lora_config(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                storage: StorageResource, sft_dataset: dict | None) -> dg.Output:
    """The LoRA configuration of the training: the settings given in the run config, else the
    meta-LLM's recommendation from the dataset's statistics, validated against the bounds (no
    usable reply: the AutoMem paper's defaults scaled to the base, and the record says so). Saved as
    ``lora_config.json`` beside the dataset; one already chosen is read back."""
    if sft_dataset is None:
        context.log.info("no dataset this round (a pending adapter is resumed): nothing to configure")
        return dg.Output(None, metadata={"outcome": "skipped"})
    settings = config.settings(game_of(context.partition_key))
    store = storage.storage()
    data = curated(sft_dataset["dataset_dir"])
    limit = serving_rank_limit(endpoints.config())
    choice = endpoints.run(lambda clients: lora_config_stage(data, settings, clients.meta, max_rank=limit),
                           store.runs / "logs")
    path = Path(data.out_dir) / "lora_config.json"
    context.log.info(f"{choice.source} settings: {choice.settings.model_dump_json()}")
    return dg.Output({**sft_dataset, "lora_config": str(path)}, metadata=lora_config_metadata(choice, path))


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "pytorch", "mlflow"}, tags=TAGS)
def lora_adapter(context: dg.AssetExecutionContext, config: ProficiencyConfig, storage: StorageResource,
                 mlflow: MlflowResource, lora_config: dict | None) -> dg.Output:
    """The memory specialist: a LoRA adapter trained on the dataset (completion-only loss, held-out
    validation by episode, checkpoints a rerun resumes from), exported as GGUF for the embedded
    server and registered as pending in ``assets/specialists/<family>.json``. Logged to MLflow with
    its loss curves, and registered there as a new version of ``automem-<family>-specialist``.
    An adapter left pending by an earlier round is returned instead of training another."""
    settings = config.settings(game_of(context.partition_key))
    game, family = settings.game, settings.family
    store = storage.storage()
    record = start_proficiency_round(settings, store).pending
    if record is not None:
        outcome = "resumed"
        context.log.info(f"resuming pending adapter {record.id} (an earlier round stopped before its decision)")
    elif lora_config is None:
        raise dg.Failure(description=f"{game}: no dataset and no pending adapter (the pending one was decided "
                                     "meanwhile); materialize the whole proficiency_round_job again")
    else:
        outcome = "trained"
        data = curated(lora_config["dataset_dir"])
        choice = LoraChoice.load(Path(lora_config["lora_config"]))
        scaffold = load_scaffold(family, lora_config["scaffold_version"], store.scaffolds)
        steps = f"at most {settings.max_train_steps} steps" if settings.max_train_steps else f"{choice.settings.epochs} epochs"
        context.log.info(f"training on {data.examples} examples ({settings.base}, {steps})")
        record = train_stage(data, choice, scaffold, settings, store, _training_log(context.log))
        context.log.info(f"adapter {record.id} registered as pending: {record.gguf or record.adapter_dir}")
    training = training_record(record)
    plot, run = report_training(game, record, training, store, mlflow.tracker() if outcome == "trained" else None)
    metadata = adapter_metadata(game, record, training, plot, outcome, run)
    if run is not None:
        context.log.info(f"MLflow training run: {run.url}")
    return dg.Output({"game": game, "adapter": record.id, "outcome": outcome, "loss_plot": str(plot)},
                     metadata=metadata)


@dg.asset(group_name=EVALUATION_GROUP, partitions_def=game_partitions, kinds={"python", "llm"}, tags=EVALUATION_TAGS,
          retry_policy=ROLLOUT_RETRY)
def specialist_evaluation(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                          storage: StorageResource, lora_adapter: dict) -> dg.Output:
    """The two-model agent (the specialist does the memory operations, the frozen game model picks
    the actions) against the one-model champion, the same scaffold, on the same fixed evaluation
    seeds (paired). The embedded server loads the adapter's GGUF; a vLLM memory endpoint loads its
    peft folder at run time under a name carrying its content hash, verified before the first turn.
    The decision is not taken here: the ``specialist_gate`` check previews it and
    ``champion_specialist`` takes it."""
    settings = config.settings(game_of(context.partition_key))
    game, family = settings.game, settings.family
    store = storage.storage()
    record = registry(store, family).record(lora_adapter["adapter"])
    scaffold = load_scaffold(family, record.scaffold_version, store.scaffolds)
    seeds = settings.budget.eval_seed_list(store.seeds_file)
    two_model, lora = specialist_endpoints(endpoints.config(), record, family)
    context.log.info(f"specialist {record.id} + frozen game model vs the one-model champion v{scaffold.version} on "
                     f"seeds {seeds}, {settings.budget.eval_max_steps} steps each")
    progress = episode_log(context.log)

    async def both(clients):
        played = await specialist_evaluation_stage(settings, scaffold, record, clients, store, progress)
        return *played, clients.describe()

    spec, champ, described = endpoints.run(both, store.runs / "logs", config=two_model, lora=lora,
                                                two_model=True)
    metadata = specialist_evaluation_metadata(game, record.id, scaffold.version, spec, champ,
                                              report_dir(store, game) / f"{record.id}_behaviour.png", described)
    context.log.info(f"specialist {record.id} {spec.progression} vs one-model champion {champ.progression}: "
                     f"{metadata['paired_difference']}")
    value = {"game": game, "outcome": "evaluated", "adapter": record.id, "scaffold_version": scaffold.version,
             "seeds": seeds, "eval_max_steps": settings.budget.eval_max_steps, "specialist_batch": spec.out_dir,
             "champion_batch": champ.out_dir, "per_seed": {"specialist": per_seed(spec), "champion": per_seed(champ)},
             "endpoints": described, "loss_plot": lora_adapter.get("loss_plot"), "gate": settings.budget.gate.as_dict()}
    return dg.Output(value, metadata=metadata)


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "mlflow"}, tags=TAGS)
def champion_specialist(context: dg.AssetExecutionContext, storage: StorageResource, mlflow: MlflowResource,
                        specialist_evaluation: dict) -> dg.Output:
    """The specialist in service after the keep-or-rollback decision on the evaluation: the adapter
    is kept only if the two-model agent's mean progression on the fixed seeds is strictly higher
    than the one-model champion's. This is the only place the specialist pointer moves. Logs both
    evaluations to MLflow and plots them side by side. A decision already taken (a retried
    promotion) is shown again, not taken twice."""
    game = game_of(context.partition_key)
    store = storage.storage()
    adapter_id = specialist_evaluation["adapter"]
    specialist = load_summary(Path(specialist_evaluation["specialist_batch"]))
    champion = load_summary(Path(specialist_evaluation["champion_batch"]))
    decision, tracker = decide_once(
        context, load_specialist_decision(store, game, adapter_id),
        lambda: decide_specialist_stage(game, adapter_id, specialist, champion, store,
                                        GatePolicy(**specialist_evaluation.get("gate", {}))), mlflow, adapter_id)
    context.log.info(decision.reason)
    record = registry(store, game_family(game)).record(adapter_id)
    loss_plot = specialist_evaluation.get("loss_plot")
    extra = [Path(loss_plot)] if loss_plot and Path(loss_plot).exists() else []
    report = report_specialist(game, record, decision, specialist, champion, specialist_evaluation["endpoints"], store,
                               tracker, specialist_evaluation["eval_max_steps"], extra)
    metadata = specialist_decision_metadata(game, decision, report.runs, report.plots)
    log_run_links(context, report.runs)
    return dg.Output({**asdict(decision), "decision": metadata["decision"]}, metadata=metadata)
