"""DVC's round is the loops' round: what its stage commands add to the functions the CLI and Dagster call.

The rollout stages start the round with ``start_round`` / ``start_proficiency_round``: a challenger an
earlier round left pending in the lineage or the specialist registry is resumed (nothing is played; a
``resumed.json`` marker is passed on to its evaluation), else the lineage's champion is played on the
loop's next block of training seeds. The revise stage registers its candidate in the lineage and the
finetune stage its adapter in the registry, as pending, exactly as the CLI round's stages do. The evaluate
stages play that challenger beside the champion (for a specialist, the agent in service) with the rounds'
own arms (``evaluation.play_beside_champion``: replayed unless the identity's A/A was bit-identical, the A/A
measured where none is stored), and name the champion batch the decision pairs with it
(``records.round_champion_dir``). The decide stages decide that pending challenger with
``judge_challenger`` on the loop's ledger, so a DVC round records its decision in the lineage or the
registry (and ``runs/decisions/``) as a CLI round does; the flat record for ``dvc metrics`` is an export
of that one ``VerdictRecord`` (``records.flat_verdict``).

The ledger is therefore both an input of the round's first stages and what its last stage writes. DVC
forbids a stage to declare another stage's dependency as its output in a cycle, so the ledger is the
round's effect, not a declared output: after a decided round it differs from what the rollout stage
read, and the next ``dvc repro`` is the next round (a fresh block of training seeds), as the next CLI
round would be.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from automem_dagster.atomic import write_json_atomic
from automem_dagster.games import game_family
from automem_dagster.loop.challenger import VerdictRecord, judge_challenger, load_verdict_record
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.gate import identity_quote
from automem_dagster.loop.proficiency import (
    adapter_dir,
    exported_adapter,
    in_service,
    register_adapter,
    registry,
)
from automem_dagster.loop.records import (
    batch_label,
    flat_verdict,
    read_evaluation,
    round_champion_dir,
    unplayed,
    unplayed_verdict,
    write_resumed,
)
from automem_dagster.loop.storage import Storage
from automem_dagster.meta.revise import CANDIDATE_FILE, REVISION_FILE
from automem_dagster.metrics.paired import GatePolicy
from automem_dagster.rollout import BatchSummary
from automem_dagster.rollout.trajectory import read_manifest
from automem_dagster.scaffold import load_scaffold, scaffold_yaml
from automem_dagster.training.registry import AdapterRecord

PLAYED_BY = "played_by.json"
"""Written beside a curated dataset by ``automem curate``: the scaffold version that played its rollouts, the
version ``finetune --register`` records its adapter for."""


def played_by(dataset: Path) -> int:
    """The scaffold version that played the rollouts ``dataset`` was curated from (``PLAYED_BY``)."""
    path = Path(dataset) / PLAYED_BY
    if not path.exists():
        raise RoundError(f"{dataset} does not say which scaffold played its rollouts (no {PLAYED_BY}): curate it "
                         "with `automem curate --out` (the DVC curate stage) before `finetune --register`")
    return json.loads(path.read_text())["scaffold_version"]


def write_resumed_revision(storage: Storage, family: str, version: int, out: Path) -> None:
    """The revise stage of a round that resumes candidate ``version``: its folder as ``propose --out``
    leaves one (the candidate's YAML and a revision record), from the lineage's scaffold file."""
    out = Path(out)
    candidate = load_scaffold(family, version, storage.scaffolds)
    out.mkdir(parents=True, exist_ok=True)
    (out / CANDIDATE_FILE).write_text(scaffold_yaml(candidate))
    write_json_atomic(out / REVISION_FILE, {"version": version, "parent_version": candidate.parent,
                                              "rejected_reason": None, "resumed": True})
    write_resumed(out, "candidate", version)


def register_trained(storage: Storage, game: str, folder: Path, scaffold_version: int) -> AdapterRecord:
    """Register the adapter the finetune stage trained into ``folder`` as the registry's next pending
    adapter, as the CLI round's training stage does: copied under ``runs/adapters`` (the pipeline's own
    folder is replaced by the next round's), then recorded (``register_adapter``)."""
    family = game_family(game)
    exported_adapter(folder, scaffold_version)  # refuses a folder that holds no trained adapter
    target = adapter_dir(storage, game, registry(storage, family).next_id())
    shutil.copytree(folder, target, dirs_exist_ok=True)
    record = exported_adapter(target, scaffold_version)
    register_adapter(storage, family, record)
    return record


def pending_adapter(storage: Storage, game: str) -> AdapterRecord:
    """The adapter the round tests: the registry's pending one (registered by the finetune stage, or by an
    earlier round and resumed); a clear error when there is none."""
    record = registry(storage, game_family(game)).pending()
    if record is None:
        raise RoundError(f"no {game_family(game)} adapter waits for its decision in {storage.specialists}: the "
                         "finetune stage registers one; run `dvc repro` from the training rollouts")
    return record


def candidate_version(storage: Storage, candidate: BatchSummary) -> int:
    """The lineage version the candidate batch played, refused unless it is that version's registered scaffold."""
    version = read_manifest(Path(candidate.out_dir))["scaffold_version"]
    lineage = storage.load_lineage(game_family(candidate.game))
    known = {r.version: r for r in lineage.versions}.get(version)
    if known is None or known.content_hash != identity_quote(candidate)["scaffold_hash"]:
        raise RoundError(f"{candidate.out_dir} was not played by {lineage.game} v{version} as the lineage registered it: "
                         "rerun the round's revise and evaluate_candidate stages (`dvc repro`)")
    return version


def pipeline_verdict(role: str, challenger_dir: Path, champion_dir: Path, storage: Storage,
                       gate: GatePolicy | None = None) -> tuple[dict, dict[str, BatchSummary]]:
    """The decide stages: the round's pending ``role`` decided on the challenger's evaluation folder and the
    champion folder played beside it (``records.round_champion_dir``: the arm the round pairs with it) with
    the loops' one decide path (``judge_challenger`` on the lineage or the registry), as a flat record, and
    the evaluated batches by label for the plot tables. A folder holding a marker of nothing played gives
    that outcome and leaves the ledger as it is."""
    challenger = read_evaluation(challenger_dir)
    if challenger is None:
        return unplayed_verdict(role, None, *unplayed(challenger_dir)), {}
    champion_dir = round_champion_dir(champion_dir)
    champion = read_evaluation(champion_dir)
    if champion is None:
        raise ValueError(f"{champion_dir} holds a marker of nothing played, not the champion's evaluation: "
                         "point --champion at the folder `evaluate --beside-champion` played the champion into")
    labels = (batch_label(challenger_dir), batch_label(champion_dir))
    batches = {labels[1]: champion, labels[0]: challenger}
    return flat_verdict(recorded_or_new(role, challenger, champion, storage, gate), labels), batches


def recorded_or_new(role: str, challenger: BatchSummary, champion: BatchSummary, storage: Storage,
                gate: GatePolicy | None) -> VerdictRecord:
    """The decision on these batches: the one already recorded for them (a decision is taken once; the
    stage ran again, e.g. after the gate's parameters changed, which apply from the next round), else
    the ledger's pending challenger decided now."""
    game = challenger.game
    pending = candidate_version(storage, challenger) if role == "candidate" else pending_or_decided(storage, game)
    done = load_verdict_record(storage, game, role, pending)
    if done is not None and (done.challenger_batch, done.champion_batch) == (challenger.out_dir, champion.out_dir):
        return done
    if role == "candidate":
        return judge_challenger(role, game, pending, (challenger, champion), storage, gate)
    serving = in_service(storage, game_family(game))
    if serving is not None and not read_manifest(Path(champion.out_dir)).get("two_model"):
        raise RoundError(f"specialist {serving.id} is in service, and a specialist is judged against the agent in "
                         f"service; {champion.out_dir} is the one-model agent's evaluation: evaluate the adapter with "
                         "`automem evaluate --specialist ... --beside-champion ...`, which plays the agent in service")
    return judge_challenger(role, game, pending, (challenger, champion), storage, gate)


def pending_or_decided(storage: Storage, game: str) -> str:
    """The adapter a specialist decision is about: the pending one, else the last one (decided already)."""
    reg = registry(storage, game_family(game))
    record = reg.pending() or (reg.adapters[-1] if reg.adapters else None)
    if record is None:
        raise RoundError(f"no {game_family(game)} adapter is registered in {storage.specialists}: the finetune stage "
                         "registers one; run `dvc repro` from the training rollouts")
    return record.id
