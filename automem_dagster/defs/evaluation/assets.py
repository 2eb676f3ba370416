"""The candidate and the champion played on the fixed evaluation seeds, side by side."""

import dagster as dg

from automem_dagster.defs.common.config import ROLLOUT_RETRY, RoundConfig
from automem_dagster.defs.common.gate import candidate_evaluation_metadata
from automem_dagster.defs.common.metadata import no_candidate_metadata
from automem_dagster.defs.common.partitions import game_of, game_partitions
from automem_dagster.defs.common.progress import episode_log
from automem_dagster.defs.common.resources import LLMEndpointsResource, StorageResource
from automem_dagster.loop.gate import per_seed
from automem_dagster.loop.report import report_dir
from automem_dagster.loop.storage import load_champion
from automem_dagster.loop.structure import evaluate_pair_stage
from automem_dagster.scaffold import load_scaffold

GROUP = "evaluation"
TAGS = {"domain": "evaluation"}


@dg.asset(group_name=GROUP, partitions_def=game_partitions, kinds={"python", "llm"}, tags=TAGS,
          retry_policy=ROLLOUT_RETRY)
def candidate_evaluation(context: dg.AssetExecutionContext, config: RoundConfig, endpoints: LLMEndpointsResource,
                         storage: StorageResource, scaffold_candidate: dict) -> dg.Output:
    """Candidate and champion on the same fixed evaluation seeds (paired), with progression ± SE and
    behaviour metrics for both. A champion batch already played with the same seeds and steps is
    reused. The keep-or-rollback decision is not taken here: the ``evaluation_gate`` check previews
    it and ``champion_scaffold`` takes it. Without a candidate (revision rejected) nothing is played."""
    if scaffold_candidate.get("candidate") is None:
        reason = scaffold_candidate.get("reason") or "the revision produced no candidate"
        context.log.info(f"no candidate to evaluate: {reason}")
        return dg.Output({**scaffold_candidate, "outcome": "no candidate", "reason": reason},
                         metadata=no_candidate_metadata(reason))
    settings = config.settings(game_of(context.partition_key))
    game, family = settings.game, settings.family
    store = storage.storage()
    candidate = load_scaffold(family, scaffold_candidate["candidate"], store.scaffolds)
    champion = load_champion(family, store)
    seeds = settings.eval_seed_list(store.seeds_file)
    context.log.info(f"candidate v{candidate.version} and champion v{champion.version} on seeds {seeds}, "
                     f"{settings.eval_max_steps} steps each")

    async def both(clients):
        played = await evaluate_pair_stage(settings, candidate, champion, clients, store, episode_log(context.log))
        return *played, clients.describe()

    cand, champ, described = endpoints.run(both, store.runs / "logs")
    metadata = candidate_evaluation_metadata(game, cand, champ, report_dir(store, game) / f"v{candidate.version}_behaviour.png",
                                             candidate.version, champion.version)
    context.log.info(f"candidate v{candidate.version} {cand.progression} vs champion v{champion.version} "
                     f"{champ.progression}: {metadata['paired_difference']}")
    value = {**scaffold_candidate, "outcome": "evaluated", "champion": champion.version, "seeds": seeds,
             "eval_max_steps": settings.eval_max_steps, "candidate_batch": cand.out_dir, "champion_batch": champ.out_dir,
             "per_seed": {"candidate": per_seed(cand), "champion": per_seed(champ)}, "endpoints": described,
             "gate": settings.gate.as_dict()}
    return dg.Output(value, metadata=metadata)
