"""The candidate and the champion played on the fixed evaluation seeds, side by side: the body of the
structure plan's ``candidate_evaluation`` step (built with the others in ``defs/structure/assets.py``),
in the evaluation group beside the specialist's evaluation."""

from typing import Any

import dagster as dg

from automem_dagster.defs.common.config import RoundConfig
from automem_dagster.defs.execution.partitions import game_of
from automem_dagster.defs.execution.shards import Arm, merge_arms, shard_outputs
from automem_dagster.defs.metadata.structure import candidate_evaluation_metadata, no_candidate_metadata
from automem_dagster.defs.plans.assets import Batch
from automem_dagster.defs.plans.challenger import CANDIDATE, evaluated
from automem_dagster.defs.plans.values import Candidate, EvaluationPlan, NotEvaluated, Shard
from automem_dagster.defs.resources import StorageResource
from automem_dagster.loop.evaluation import champion_arms, champion_plan, evaluation_spec, round_champion
from automem_dagster.loop.report import report_dir
from automem_dagster.loop.storage import load_champion
from automem_dagster.scaffold import load_scaffold

GROUP = "evaluation"


def evaluation_plan(context: dg.OpExecutionContext, config: RoundConfig, storage: StorageResource,
                    scaffold_candidate: Candidate):
    """Candidate and champion on the same fixed evaluation seeds (paired), with progression ± SE and
    behaviour metrics for both; each batch played in ``shards`` seed shards, one step each, the candidate's
    and the champion's alternating. The champion is played again beside the candidate unless its
    identity's A/A replays were bit-identical (``loop.evaluation.champion_arms``); where no A/A is stored
    yet, this round measures it. The keep-or-rollback decision is not
    taken here: the ``evaluation_gate`` check previews it and ``champion_scaffold`` takes it. Without a
    candidate (revision rejected) nothing is played."""
    if scaffold_candidate.candidate is None:
        reason = scaffold_candidate.reason or "the revision produced no candidate"
        context.log.info(f"no candidate to evaluate: {reason}")
        yield dg.Output(NotEvaluated(scaffold_candidate.game, reason), "plan")
        yield from shard_outputs([])
        return
    settings = config.for_game(game_of(context.partition_key))
    store = storage.storage()
    candidate = load_scaffold(settings.family, scaffold_candidate.candidate, store.scaffolds)
    champion = load_champion(settings.family, store)
    seeds = settings.eval_seed_list(store.seeds_file)
    context.log.info(f"candidate v{candidate.version} and champion v{champion.version} on seeds {seeds}, "
                     f"{settings.budget.eval_max_steps} steps each, {config.sharding()} each")
    yield dg.Output(EvaluationPlan(settings.game, candidate.version, tuple(seeds), settings.budget.eval_max_steps,
                                   settings.gate.policy(), champion=champion.version, candidate=scaffold_candidate),
                    "plan")
    champions = champion_arms(evaluation_spec(settings, champion, store), f"v{candidate.version}", store)
    context.log.info(champion_plan(champions))
    yield from shard_outputs([Arm("candidate", evaluation_spec(settings, candidate, store)),
                              *(Arm(name, spec) for name, spec in champions.items())], config)


def evaluation_merge(context: dg.OpExecutionContext, storage: StorageResource, plan: Any,
                     played: list[Shard]) -> dg.Output:
    """Both batches merged from their shards, side by side with progression ± SE and behaviour metrics
    (``plan``: the ``EvaluationPlan``, or ``NotEvaluated``, passed on as the value)."""
    if isinstance(plan, NotEvaluated):
        return dg.Output(plan, metadata=no_candidate_metadata(plan.reason))
    game = game_of(context.partition_key)
    store = storage.storage()
    batches, described = merge_arms(store, played)
    cand, champ = batches["candidate"], round_champion(batches, store)
    metadata = candidate_evaluation_metadata(game, cand, champ, report_dir(store, game) / f"v{plan.challenger}_behaviour.png",
                                             plan.challenger, plan.champion)
    context.log.info(f"candidate v{plan.challenger} {cand.progression} vs champion v{plan.champion} "
                     f"{champ.progression}: {metadata['paired_difference']}")
    return dg.Output(evaluated(CANDIDATE, plan, cand, champ, described, store), metadata=metadata)


CANDIDATE_EVALUATION = Batch(evaluation_plan, evaluation_merge, group=GROUP)
"""How the structure plan's ``candidate_evaluation`` step plays: its plan and merge, in the evaluation group."""
