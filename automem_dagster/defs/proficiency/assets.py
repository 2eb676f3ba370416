"""The proficiency loop's assets, built from its plan (``loop/round_plan.PROFICIENCY_ROUND``) by
``defs/plans/assets.py``; this module holds each step's body: the stage it runs and what it shows.

``training_rollouts`` -> ``sft_dataset`` -> ``lora_config`` -> ``lora_adapter`` ->
``specialist_evaluation`` (with the ``specialist_gate`` check) -> ``champion_specialist``.
Values passed between them are folders and the typed values of ``plans/values.py``; everything else
is read back from the files the stages wrote. An adapter trained but not yet decided is resumed: the next round
skips rollouts, curation and configuration and evaluates it instead of training another.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

# specialist_evaluation sits in the evaluation group beside candidate_evaluation: both play a
# challenger against the champion in service on the fixed seeds.
from automem_dagster.defs.evaluation.assets import GROUP as EVALUATION_GROUP
from automem_dagster.defs.execution.partitions import game_of
from automem_dagster.defs.execution.shards import Arm, Connection, merge_arms, shard_outputs, skipped_plan
from automem_dagster.defs.metadata.proficiency import (
    adapter_metadata,
    curation_metadata,
    dataset_metadata,
    lora_config_metadata,
    specialist_decision_metadata,
    specialist_evaluation_metadata,
)
from automem_dagster.defs.plans.assets import Batch, Body, Loop, plan_assets
from automem_dagster.defs.plans.challenger import SPECIALIST, evaluated, log_run_links, promote
from automem_dagster.defs.plans.values import (
    Adapter,
    Dataset,
    Evaluation,
    EvaluationPlan,
    LoraFile,
    PlayPlan,
    Promotion,
    Resumed,
    Shard,
    resumed,
)
from automem_dagster.defs.plans.versions import versioned_output
from automem_dagster.defs.proficiency.config import ProficiencyConfig
from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.games import game_family
from automem_dagster.llm.session import META_ONLY
from automem_dagster.loop.evaluation import champion_arms, champion_plan, round_champion
from automem_dagster.loop.proficiency import (
    curate_stage,
    curated,
    dataset_dir,
    in_service,
    lora_config_stage,
    registry,
    specialist_evaluation_specs,
    start_proficiency_round,
    train_stage,
    training_record,
    training_rollout_spec,
)
from automem_dagster.loop.records import TOO_SMALL, write_too_small
from automem_dagster.loop.report import RoundReport, report_dir, report_specialist, report_training
from automem_dagster.loop.round_plan import PROFICIENCY_ROUND
from automem_dagster.loop.serving import check_specialist_served, serving_rank_limit, specialist_endpoints, with_training_base
from automem_dagster.loop.storage import Storage
from automem_dagster.meta.curate import DatasetTooSmall
from automem_dagster.meta.lora_config import LoraChoice
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold
from automem_dagster.training.registry import AdapterRecord

GROUP = "proficiency"



def _training_log(log):
    """A trainer ``progress(step, total, logs)`` callback that logs each logged step."""

    def progress(step: int, total: int, logs: dict[str, float]) -> None:
        figures = ", ".join(f"{k} {v:.4g}" for k, v in logs.items() if isinstance(v, int | float))
        log.info(f"training step {step}/{total}: {figures}")

    return progress


def training_plan(context: dg.OpExecutionContext, config: ProficiencyConfig, storage: StorageResource):
    """The champion scaffold played by the agent in service on fresh training seeds (disjoint from the
    evaluation seeds and from the structure loop's diagnosis seeds): the memory decisions the
    specialist learns from. The value is the batch directory; played in ``shards`` seed shards, one
    step each. It depends on ``champion_scaffold``: a new champion (a new data version, its content
    hash) makes this round's specialist stale. The plan step decides what the round does
    (``start_proficiency_round``) and splits the training seeds into shards.

    Skipped while an earlier round's adapter still waits for its decision (the value is then
    ``Resumed`` with the pending adapter, which the later steps pass on): this round
    then evaluates that adapter instead of training a new one."""
    settings = config.for_game(game_of(context.partition_key))
    store = storage.storage()
    start = start_proficiency_round(settings, store)
    if start.resumes:
        yield from skipped_plan(context, Resumed(f"adapter {start.pending.id} of an earlier round is pending: this "
                                                 "round evaluates it, no new rollouts", start.pending))
        return
    champion, seeds = start.scaffold, start.seeds
    serving = in_service(store, settings.family)
    agent = f"the two-model agent with specialist {serving.id}" if serving else "the one-model agent"
    context.log.info(f"champion v{champion.version} played by {agent} (in service) on training seeds {seeds}, "
                     f"{settings.budget.rollout_max_steps} steps each, {config.sharding()}")
    yield dg.Output(PlayPlan(champion.version, tuple(seeds)), "plan")
    spec = training_rollout_spec(settings, champion, seeds, store)
    yield from shard_outputs([Arm("training", spec, one_model=serving is None)], config,
                             champion_adapter=serving.id if serving else None)


def service_connection(shard: Shard, endpoints: LLMEndpointsResource, store: Storage) -> Connection:
    """The agent in service: the two-model agent with its specialist (``adapter_connection``) once one
    was kept, else the endpoints file as it is (the one-model agent), connected as the structure round
    connects it, so its batches are the structure round's (same identity) and never carry a pending
    adapter: under the rule actor (``actor: rules``) the one-model agent keeps its memory client, which
    on a server started with the new adapter would serve that adapter."""
    if not shard.champion_adapter:
        return Connection()
    family = shard.spec["family"]
    return adapter_connection(registry(store, family).record(shard.champion_adapter), endpoints, family)


def sft_dataset_body(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                storage: StorageResource, training_rollouts: Any) -> Iterator[dg.Output | dg.AssetObservation]:
    """The specialist's SFT dataset, curated from the training rollouts: each memory decision scored
    by its effect (the cheap score, or the measured effect of a replayed sample), borderline ones
    reviewed by the meta-LLM, duplicates and over-represented episodes removed, evaluation seeds never
    included. Its content hash is the dataset's version.
    Below ``min_examples`` the round ends here as designed: no value, so Dagster skips training and evaluation
    and the run succeeds; an observation of this asset and ``too_small.json`` beside the audit files say why.
    A batch already curated is read back. The value is the dataset directory and its scaffold version."""
    if resumed(training_rollouts) is not None:
        context.log.info("no rollouts this round (a pending adapter is resumed): nothing to curate")
        yield dg.Output(training_rollouts, metadata={"outcome": "skipped"})
        return
    settings = config.for_game(game_of(context.partition_key))
    store = storage.storage()
    batch = Path(training_rollouts)
    manifest = read_manifest(batch)
    version = manifest["scaffold_version"]
    scaffold = load_scaffold(settings.family, version, store.scaffolds)
    context.log.info(f"curating {batch} (scaffold v{version}), at least {settings.curation_settings().min_examples} examples")
    try:
        # A counterfactual replay plays the batch's decisions again: it needs the roles that played it.
        replaying = settings.curation.replay.decisions != 0
        data = endpoints.run(lambda clients: curate_stage(batch, scaffold, settings, clients.meta, store, context.log.info,
                                                          players=clients if replaying else None),
                             store.runs / "logs", roles=None if replaying else META_ONLY,
                             two_model=replaying and bool(manifest.get("two_model")))
    except DatasetTooSmall as exc:
        context.log.warning(f"the round ends before training, as designed: {exc}")
        out = dataset_dir(store, batch)
        write_too_small(out, str(exc))
        stats = json.loads((out / "stats.json").read_text()) if (out / "stats.json").exists() else None
        yield dg.AssetObservation(asset_key=context.asset_key, partition=context.partition_key,
                                  metadata={"outcome": "dataset_too_small", "reason": str(exc),
                                            **(curation_metadata(stats, out) if stats else {})})
        return
    stats = data.stats
    context.log.info(f"{data.examples} examples from {stats['kept_decisions']} decisions, version "
                     f"{stats['dataset_hash']}: {data.out_dir}")
    (Path(data.out_dir) / TOO_SMALL).unlink(missing_ok=True)
    yield versioned_output(Dataset(str(data.out_dir), version),
                            dataset_metadata(stats, Path(data.out_dir), version), dg.DataVersion(stats["dataset_hash"]))


def lora_config_body(context: dg.AssetExecutionContext, config: ProficiencyConfig, endpoints: LLMEndpointsResource,
                storage: StorageResource, sft_dataset: Any) -> dg.Output:
    """The LoRA configuration of the training: the settings given in the run config, else the
    meta-LLM's recommendation from the dataset's statistics, validated against the bounds (no
    usable reply: the AutoMem paper's defaults scaled to the base, and the record says so). Saved as
    ``lora_config.json`` beside the dataset; one already chosen is read back."""
    if resumed(sft_dataset) is not None:
        context.log.info("no dataset this round (a pending adapter is resumed): nothing to configure")
        return dg.Output(sft_dataset, metadata={"outcome": "skipped"})
    settings = with_training_base(config.for_game(game_of(context.partition_key)), endpoints.config())
    store = storage.storage()
    data = curated(sft_dataset.dataset_dir)
    limit = serving_rank_limit(endpoints.config())
    choice = endpoints.run(lambda clients: lora_config_stage(data, settings, clients.meta, max_rank=limit),
                           store.runs / "logs", roles=META_ONLY)
    path = Path(data.out_dir) / "lora_config.json"
    context.log.info(f"{choice.source} settings: {choice.settings.model_dump_json()}")
    return dg.Output(LoraFile(sft_dataset, str(path)), metadata=lora_config_metadata(choice, path))


def lora_adapter_body(context: dg.AssetExecutionContext, config: ProficiencyConfig, storage: StorageResource,
                 mlflow: MlflowResource, endpoints: LLMEndpointsResource, lora_config: Any) -> dg.Output:
    """The memory specialist: a LoRA adapter trained on the dataset (completion-only loss, held-out
    validation by episode, checkpoints a rerun resumes from), exported as GGUF for the embedded
    server and registered as pending in ``assets/specialists/<family>.json``. Logged to MLflow with
    its loss curves, and registered there as a new version of ``automem-<family>-specialist``.
    An adapter left pending by an earlier round (the round's start said so, ``training_rollouts``) is
    returned instead of training another. Without a
    ``base`` in the run config it trains on the base the vLLM memory endpoint serves (``with_training_base``)."""
    settings = with_training_base(config.for_game(game_of(context.partition_key)), endpoints.config())
    game, family = settings.game, settings.family
    store = storage.storage()
    pending = resumed(lora_config)
    if pending is not None:
        outcome = "resumed"
        record = registry(store, family).record(pending.id)
        context.log.info(f"resuming pending adapter {record.id} (an earlier round stopped before its decision)")
    else:
        outcome = "trained"
        data = curated(lora_config.dataset.dataset_dir)
        choice = LoraChoice.load(Path(lora_config.config_file))
        scaffold = load_scaffold(family, lora_config.dataset.scaffold_version, store.scaffolds)
        cap = settings.training.max_train_steps
        steps = f"at most {cap} steps" if cap else f"{choice.settings.epochs} epochs"
        context.log.info(f"training on {data.examples} examples ({settings.training.base}, {steps})")
        record = train_stage(data, choice, scaffold, settings, store, _training_log(context.log))
        context.log.info(f"adapter {record.id} registered as pending: {record.gguf or record.adapter_dir}")
    training = training_record(record)
    plot, run = report_training(game, record, training, store, mlflow.tracker() if outcome == "trained" else None)
    metadata = adapter_metadata(game, record, training, plot, outcome, run)
    if run is not None:
        context.log.info(f"MLflow training run: {run.url}")
    report = RoundReport({"training": run} if run else {}, {"losses": plot})
    return dg.Output(Adapter(game, record.id, outcome, str(plot), report), metadata=metadata)


def specialist_plan(context: dg.OpExecutionContext, config: ProficiencyConfig, storage: StorageResource,
                    lora_adapter: Adapter):
    """The two-model agent (the specialist does the memory operations, the frozen game model picks
    the actions) against the agent in service (``loop.proficiency.in_service``: the specialist kept last,
    else the one-model agent), the same scaffold, on the same fixed evaluation seeds (paired), the
    champion played again beside it unless its A/A replays were bit-identical; each batch played in
    ``shards`` seed shards, one step each. The embedded server
    loads the adapter's GGUF; a vLLM memory endpoint loads its peft folder at run time under a name
    carrying its content hash, verified before the first turn. The decision is not taken here: the
    ``specialist_gate`` check previews it and ``champion_specialist`` takes it."""
    settings = config.for_game(game_of(context.partition_key))
    store = storage.storage()
    record = registry(store, settings.family).record(lora_adapter.adapter)
    scaffold = load_scaffold(settings.family, record.scaffold_version, store.scaffolds)
    specialist, champion = specialist_evaluation_specs(settings, scaffold, record, store)
    serving = in_service(store, settings.family)
    against = f"specialist {serving.id} in service" if serving else "the one-model agent in service"
    context.log.info(f"specialist {record.id} + frozen game model vs {against}, scaffold v{scaffold.version}, on "
                     f"seeds {specialist.seeds}, {specialist.max_steps} steps each, {config.sharding()} each")
    yield dg.Output(EvaluationPlan(settings.game, record.id, tuple(specialist.seeds), specialist.max_steps,
                                   settings.gate.policy(), scaffold_version=scaffold.version,
                                   loss_plot=lora_adapter.loss_plot), "plan")
    champions = champion_arms(champion, f"specialist-{record.id}", store)
    context.log.info(champion_plan(champions))
    yield from shard_outputs([Arm("specialist", specialist),
                              *(Arm(name, spec, one_model=serving is None) for name, spec in champions.items())],
                             config, adapter=record.id, champion_adapter=serving.id if serving else None)


def specialist_connection(shard: Shard, endpoints: LLMEndpointsResource, store: Storage) -> Connection:
    """The new adapter's arm connects as the two-model agent with it; the champion's arms as the agent in
    service (``service_connection``)."""
    if shard.arm != "specialist":
        return service_connection(shard, endpoints, store)
    family = shard.spec["family"]
    return adapter_connection(registry(store, family).record(shard.adapter), endpoints, family)


def adapter_connection(record: AdapterRecord, endpoints: LLMEndpointsResource, family: str) -> Connection:
    """The two-model agent with ``record`` serving the memory role: the embedded server loads the adapter's
    GGUF, a vLLM memory endpoint loads its peft folder (already served: confirmed), and the served adapter
    is checked before a turn."""
    two_model, lora = specialist_endpoints(endpoints.config(), record, family)
    return Connection(two_model, lora, two_model=True,
                      check=lambda clients: check_specialist_served(clients.memory, family, record))


def specialist_merge(context: dg.OpExecutionContext, storage: StorageResource, plan: EvaluationPlan,
                     played: list[Shard]) -> dg.Output:
    """Both batches merged from their shards, paired, with behaviour metrics."""
    store = storage.storage()
    batches, described = merge_arms(store, played)
    spec, champ = batches["specialist"], round_champion(batches, store)
    game, adapter = plan.game, plan.challenger
    metadata = specialist_evaluation_metadata(game, adapter, plan.scaffold_version, spec, champ,
                                              report_dir(store, game) / f"{adapter}_behaviour.png", described)
    context.log.info(f"specialist {adapter} {spec.progression} vs the agent in service {champ.progression}: "
                     f"{metadata['paired_difference']}")
    return dg.Output(evaluated(SPECIALIST, plan, spec, champ, described, store), metadata=metadata)


def champion_specialist_body(context: dg.AssetExecutionContext, storage: StorageResource, mlflow: MlflowResource,
                        specialist_evaluation: Evaluation) -> dg.Output:
    """The specialist in service after the round's gate on the evaluation: the adapter is kept only
    when the gate (``metrics.paired``) keeps the two-model agent against the agent in service;
    rolled back and inconclusive leave the specialist in service. This is the only place the specialist pointer moves. Logs both
    evaluations to MLflow and plots them side by side. A decision already taken (a retried
    promotion) is shown again, not taken twice."""
    game = game_of(context.partition_key)
    store = storage.storage()
    decision, specialist, champion, tracker = promote(context, SPECIALIST, specialist_evaluation, store,
                                                      mlflow)
    record = registry(store, game_family(game)).record(decision.challenger)
    loss_plot = specialist_evaluation.plan.loss_plot
    extra = [Path(loss_plot)] if loss_plot and Path(loss_plot).exists() else []
    report = report_specialist(game, record, decision, specialist, champion, specialist_evaluation.endpoints, store,
                               tracker, specialist_evaluation.plan.eval_max_steps, extra)
    metadata = specialist_decision_metadata(game, decision, report.runs, report.plots)
    log_run_links(context, report.runs)
    return dg.Output(Promotion(game, decision, report), metadata=metadata)


BODIES = {
    "training_rollouts": Batch(training_plan, connection=service_connection),
    "sft_dataset": Body(sft_dataset_body, frozenset({"python", "llm", "parquet"}), may_stop=True),
    "lora_config": Body(lora_config_body, frozenset({"python", "llm", "json"})),
    "lora_adapter": Body(lora_adapter_body, frozenset({"python", "pytorch", "mlflow"})),
    "specialist_evaluation": Batch(specialist_plan, specialist_merge, specialist_connection, group=EVALUATION_GROUP),
    "champion_specialist": Body(champion_specialist_body, frozenset({"python", "mlflow"})),
}
"""What each step of the proficiency round runs in Dagster."""
ASSETS = plan_assets(PROFICIENCY_ROUND, BODIES, Loop(GROUP, ProficiencyConfig))
"""The proficiency round's assets, by step."""
training_rollouts = ASSETS["training_rollouts"]
sft_dataset = ASSETS["sft_dataset"]
lora_config = ASSETS["lora_config"]
lora_adapter = ASSETS["lora_adapter"]
specialist_evaluation = ASSETS["specialist_evaluation"]
champion_specialist = ASSETS["champion_specialist"]
