"""The structure loop's assets, built from its plan (``loop/round_plan.STRUCTURE_ROUND``) by
``defs/plans/assets.py``; this module holds each step's body: the stage it runs and what it shows.

``rollout_batch`` -> ``diagnosis`` -> ``scaffold_candidate`` -> ``candidate_evaluation`` (its body in
the evaluation domain) -> ``champion_scaffold``. Values passed between them are folders and the typed
values of ``plans/values.py``; everything else is read back from the files the stages wrote.
``scaffold_version`` stands beside the chain, no step of the plan: one partition per version, for
looking at a version's YAML and fate.
"""

from pathlib import Path
from typing import Any

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.evaluation.assets import CANDIDATE_EVALUATION
from automem_dagster.defs.execution.partitions import (
    ensure_version_partition,
    game_of,
    parse_version_key,
    scaffold_versions,
)
from automem_dagster.defs.execution.shards import Arm, shard_outputs, skipped_plan
from automem_dagster.defs.metadata.long_values import long_text
from automem_dagster.defs.metadata.structure import (
    decision_metadata,
    diagnosis_metadata,
    no_decision_metadata,
    revision_metadata,
    scaffold_version_metadata,
)
from automem_dagster.defs.plans.assets import Batch, Body, Loop, plan_assets
from automem_dagster.defs.plans.challenger import CANDIDATE, log_run_links, promote
from automem_dagster.defs.plans.values import (
    Candidate,
    NotDiagnosed,
    NotEvaluated,
    PlayPlan,
    Promotion,
    Resumed,
    resumed,
)
from automem_dagster.defs.plans.versions import (
    champion_data_version,
    record_scaffold_versions,
    scaffold_data_version,
    versioned_output,
)
from automem_dagster.defs.resources import LLMEndpointsResource, MlflowResource, StorageResource
from automem_dagster.games import game_family
from automem_dagster.llm.session import META_ONLY
from automem_dagster.loop.report import report_round
from automem_dagster.loop.round_plan import STRUCTURE_ROUND
from automem_dagster.loop.structure import (
    RoundResult,
    diagnose_stage,
    revise_stage,
    rollout_spec,
    start_round,
)
from automem_dagster.meta.diagnose import Diagnosis, NoUsableDiagnosis
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold

GROUP = "structure"
TAGS = {"domain": "structure"}


@dg.asset(group_name=GROUP, partitions_def=scaffold_versions, kinds={"yaml"}, tags=TAGS)
def scaffold_version(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    """One scaffold version (partition ``<family>-v<N>``): its YAML, content hash (its data version),
    parent, and what the lineage decided about it. Every version that exists is a partition, whatever
    made it: the round's assets and the CLI record each version when it is made and when it is decided
    (``defs/plans/versions.py``); materializing a partition here shows it as it is now."""
    family, version = parse_version_key(context.partition_key)
    store = storage.storage()
    metadata = scaffold_version_metadata(store, family, version)
    context.log.info(f"{family} v{version}: {metadata['decision']}{' (champion)' if metadata['champion'] else ''}")
    return dg.MaterializeResult(metadata=metadata, data_version=scaffold_data_version(store, family, version))


def rollout_plan(context: dg.OpExecutionContext, config: RoundConfig, storage: StorageResource):
    """The champion scaffold played on fresh training seeds (disjoint from the evaluation seeds): the
    trajectories the meta-LLM diagnoses. The value is the batch directory. Played in ``shards`` seed
    shards, one step each, merged into one batch. The plan step decides what the round does
    (``start_round``) and splits the champion's training seeds into shards.

    Skipped while an earlier round's candidate still waits for its decision (the value is then
    ``Resumed`` with the pending candidate, which the later steps pass on): this round
    then finishes that candidate instead of making a new one."""
    settings = config.for_game(game_of(context.partition_key))
    store = storage.storage()
    start = start_round(settings, store)
    champion = start.scaffold
    record_scaffold_versions(context.instance, store, settings.family, [champion.version], only_new=True)
    if start.resumes:
        pending = start.pending
        yield from skipped_plan(context, Resumed(
            f"candidate v{pending.version} of an earlier round is pending: this round resumes it, no new rollouts",
            pending))
        return
    spec = rollout_spec(settings, champion, start.seeds, store)
    context.log.info(f"champion v{champion.version} on training seeds {spec.seeds}, {spec.max_steps} steps each, "
                     f"{config.sharding()}")
    yield dg.Output(PlayPlan(champion.version, tuple(spec.seeds)), "plan")
    yield from shard_outputs([Arm("rollout", spec)], config)


def diagnosis_body(context: dg.AssetExecutionContext, config: RoundConfig, endpoints: LLMEndpointsResource,
              storage: StorageResource, rollout_batch: Any) -> dg.Output:
    """The meta-LLM's reading of the rollout trajectories: where the scaffold made memory go wrong,
    each finding citing an episode and step (findings citing steps that do not exist are dropped).
    The value is the diagnosis directory; a batch already diagnosed is read back, not asked again.
    In a round that resumes a pending candidate, the value is what it resumes, passed on. Where the meta-LLM
    gives no usable diagnosis within its attempts (a 135M model mostly does), the value is ``NotDiagnosed``:
    the round makes no candidate and ends as designed, where it failed with a stack trace before."""
    if resumed(rollout_batch) is not None:
        context.log.info("no rollouts this round (a pending candidate is resumed): nothing to diagnose")
        return dg.Output(rollout_batch, metadata={"outcome": "skipped"})
    store = storage.storage()
    batch = Path(rollout_batch)
    version = read_manifest(batch)["scaffold_version"]
    scaffold = load_scaffold(game_family(game_of(context.partition_key)), version, store.scaffolds)
    context.log.info(f"diagnosing {batch} (scaffold v{version})")
    try:
        result, out = endpoints.run(lambda clients: diagnose_stage(batch, scaffold, clients, store,
                                                                   config.budget.max_attempts),
                                    store.runs / "logs", roles=META_ONLY)
    except NoUsableDiagnosis as exc:
        context.log.warning(f"no candidate this round, as designed: {exc}")
        return dg.Output(NotDiagnosed(version, str(exc)), metadata={"outcome": "no_usable_diagnosis",
                                                                     "reason": str(exc)})
    context.log.info(f"{len(result.findings)} findings, {len(result.dropped)} dropped: {out}")
    return dg.Output(str(out), metadata=diagnosis_metadata(result, out))


def scaffold_candidate_body(context: dg.AssetExecutionContext, config: RoundConfig, endpoints: LLMEndpointsResource,
                       storage: StorageResource, diagnosis: Any) -> dg.Output:
    """The meta-LLM's revision of the scaffold the diagnosed batch played (the champion), answering the
    diagnosis. An accepted patch is saved as the next scaffold version, recorded in the lineage as
    pending, and added as a ``scaffold_version`` partition; a rejected one (no valid structural patch)
    materializes with its reason and leaves no candidate. A candidate left pending by an earlier round
    (the round's start said so, ``rollout_batch``) is resumed instead of revising again."""
    game = game_of(context.partition_key)
    family = game_family(game)
    store = storage.storage()
    pending = resumed(diagnosis)
    if pending is not None:
        key = ensure_version_partition(context.instance, family, pending.version)
        context.log.info(f"resuming pending candidate v{pending.version} (an earlier round stopped before its "
                         "decision)")
        diff = pending.revision_dir / "diff.md" if pending.revision_dir else None
        parent = store.load_lineage(family).record(pending.version).parent
        return dg.Output(Candidate(game, "resumed", parent, pending.version, _text(pending.diagnosis_dir),
                                   _text(pending.revision_dir)), metadata={
            "outcome": "resumed",
            "candidate": f"v{pending.version}",
            "scaffold_version": key,
            **long_text("diff", diff.read_text() if diff and diff.exists() else "(no diff stored)", markdown=True),
        })
    if isinstance(diagnosis, NotDiagnosed):
        return dg.Output(Candidate(game, "rejected", diagnosis.scaffold_version, reason=diagnosis.reason),
                         metadata={"outcome": "rejected", "reason": diagnosis.reason})
    diag = Diagnosis.load(Path(diagnosis))
    parent = load_scaffold(family, diag.scaffold_version, store.scaffolds)
    context.log.info(f"asking the meta-LLM for a revision of v{parent.version}")
    revision, out = endpoints.run(lambda clients: revise_stage(diag, Path(diagnosis), parent, clients, store,
                                                               config.budget.max_attempts, register=True), store.runs / "logs",
                                  roles=META_ONLY)
    if not revision.accepted:
        context.log.warning(f"revision rejected: {revision.rejected_reason}")
        return dg.Output(Candidate(game, "rejected", parent.version, None, diagnosis, str(out), revision.rejected_reason),
                         metadata=revision_metadata(revision, out, None))
    key = record_scaffold_versions(context.instance, store, family, [revision.version])
    context.log.info(f"candidate v{revision.version}: {', '.join(revision.changes)}")
    return dg.Output(Candidate(game, "accepted", parent.version, revision.version, diagnosis, str(out)),
                     metadata=revision_metadata(revision, out, key))


def _text(path: Path | None) -> str | None:
    return str(path) if path else None


def _stored_dir(path: str | None, file: str) -> Path | None:
    """A stage directory to report from, when it holds ``file``."""
    return Path(path) if path and (Path(path) / file).exists() else None


def champion_scaffold_body(context: dg.AssetExecutionContext, storage: StorageResource, mlflow: MlflowResource,
                      candidate_evaluation: Any) -> dg.Output:
    """The champion after the round's gate on the evaluation: the candidate is kept only when the gate
    (``metrics.paired``) keeps it; rolled back and inconclusive leave the champion in place. This is the only
    place the champion pointer moves. Logs both evaluations to MLflow and plots progression by version.
    A decision already taken (a retried promotion) is shown again, not taken twice. ``candidate_evaluation``
    is an ``Evaluation``, or ``NotEvaluated`` when the round made no candidate."""
    game = game_of(context.partition_key)
    family = game_family(game)
    store = storage.storage()
    if isinstance(candidate_evaluation, NotEvaluated):
        reason = candidate_evaluation.reason
        context.log.info(f"nothing to decide ({reason}): champion stays v{store.load_lineage(family).champion().version}")
        return versioned_output(Promotion(game, None, reason=reason), no_decision_metadata(reason, store, family),
                                champion_data_version(store, family))
    plan = candidate_evaluation.plan
    record, candidate, champion, tracker = promote(context, CANDIDATE, candidate_evaluation, store, mlflow)
    result = RoundResult.judged(record, candidate, champion,
                                _stored_dir(plan.candidate.diagnosis_dir, "diagnosis.md"),
                                _stored_dir(plan.candidate.revision_dir, "diff.md"))
    report = report_round(result, store, tracker, candidate_evaluation.endpoints, plan.eval_max_steps)
    metadata = decision_metadata(record, store, report.runs, report.plots)
    log_run_links(context, report.runs)
    record_scaffold_versions(context.instance, store, family, [record.champion_before, plan.challenger])
    return versioned_output(Promotion(game, record, report), metadata, champion_data_version(store, family))


BODIES = {
    "rollout_batch": Batch(rollout_plan),
    "diagnosis": Body(diagnosis_body, frozenset({"python", "llm"})),
    "scaffold_candidate": Body(scaffold_candidate_body, frozenset({"python", "llm", "yaml"})),
    "candidate_evaluation": CANDIDATE_EVALUATION,
    "champion_scaffold": Body(champion_scaffold_body, frozenset({"python", "mlflow"})),
}
"""What each step of the structure round runs in Dagster."""
ASSETS = plan_assets(STRUCTURE_ROUND, BODIES, Loop(GROUP))
"""The structure round's assets, by step."""
rollout_batch = ASSETS["rollout_batch"]
diagnosis = ASSETS["diagnosis"]
scaffold_candidate = ASSETS["scaffold_candidate"]
candidate_evaluation = ASSETS["candidate_evaluation"]
champion_scaffold = ASSETS["champion_scaffold"]
