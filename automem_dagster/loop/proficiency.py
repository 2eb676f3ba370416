"""One round of the proficiency loop, as stages that read and write files.

training rollouts (champion scaffold, training seeds) -> curated SFT dataset -> LoRA
configuration (meta-LLM) -> LoRA training (+ GGUF export for the embedded server) ->
evaluation of the two-model agent (specialist for memory, frozen game model for actions)
against the agent in service (the two-model agent with the current specialist once one was kept,
else the one-model agent) on the fixed evaluation seeds -> keep or roll back. The training
rollouts are played by the agent in service too.

Like the structure loop, each stage is a plain function writing under ``runs/`` at a path
derived from its inputs, so rerunning resumes: a finished dataset, configuration or adapter
is read back, and an adapter trained but not yet judged is evaluated by the next round
instead of training another. The specialist pointer (``assets/specialists/<family>.json``)
moves only in ``judge_challenger`` (``loop.ledgers.RegistryLedger``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.loop.challenger import RoundStart, VerdictRecord, load_verdict_record
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.evaluation import evaluation_spec
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.settings import ProficiencyConfig
from automem_dagster.loop.storage import Storage, batch_dir, load_champion, slug
from automem_dagster.meta.curate import STATS_FILE, CurationResult, curate
from automem_dagster.meta.lora_config import LORA_CONFIG_FILE, LoraChoice, recommend_lora
from automem_dagster.rollout import BatchSummary, RolloutSpec
from automem_dagster.rollout.seeds import eval_seeds
from automem_dagster.scaffold import Scaffold, load_scaffold
from automem_dagster.training.registry import AdapterRecord, SpecialistRegistry
from automem_dagster.training.settings import default_settings
from automem_dagster.training.sft_result import ADAPTER, DATASET_FILE, RESULT_FILE


def registry(storage: Storage, family: str) -> SpecialistRegistry:
    return SpecialistRegistry.load(family, storage.specialists)


def start_proficiency_round(settings: ProficiencyConfig, storage: Storage) -> RoundStart[AdapterRecord]:
    """The one rule for how a proficiency round begins: evaluate the ``pending`` adapter of an earlier
    round (trained, not yet judged, on the scaffold it learnt from) if there is one, else play the
    champion scaffold on the training seeds and train a new one."""
    pending = registry(storage, settings.family).pending()
    if pending is not None:
        return RoundStart(load_scaffold(settings.family, pending.scaffold_version, storage.scaffolds), pending)
    return RoundStart(load_champion(settings.family, storage), seeds=round_seeds(
        "proficiency", settings.game, settings.budget.rollout_episodes, storage, settings.seed_block))


# --- stage 1: training rollouts (on the seeds of ``seed_blocks.round_seeds``) ---------------

def in_service(storage: Storage, family: str) -> AdapterRecord | None:
    """The specialist in service (the registry's champion pointer); None while the one-model agent serves."""
    reg = registry(storage, family)
    return reg.record(reg.champion) if reg.champion is not None else None


def training_rollout_spec(settings: ProficiencyConfig, scaffold: Scaffold, seeds: list[int],
                          storage: Storage) -> RolloutSpec:
    """The training-rollout batch, played by the agent in service (``in_service``: the two-model agent with
    the current specialist once one was kept, else the one-model agent): whole, or in seed shards by Dagster."""
    budget = settings.budget
    out = batch_dir(storage.runs, "training", settings.game, scaffold.version, seeds, budget.rollout_max_steps)
    serving = in_service(storage, settings.family)
    out = out.with_name(f"{out.name}-specialist-{serving.id}") if serving is not None else out
    return RolloutSpec(settings.game, scaffold, seeds, budget.rollout_max_steps, out, budget.concurrency)


# --- stage 2: curation ----------------------------------------------------------------------

def dataset_dir(storage: Storage, batch: Path) -> Path:
    batch = Path(batch)
    return storage.runs / "datasets" / batch.parent.parent.name / batch.parent.name / batch.name


def read_curation(out: Path) -> CurationResult | None:
    """The finished curation in ``out`` (its dataset and ``stats.json``), or None when there is none."""
    out = Path(out)
    if not ((out / DATASET_FILE).exists() and (out / STATS_FILE).exists()):
        return None
    stats = json.loads((out / STATS_FILE).read_text())
    return CurationResult(str(out), stats["examples"], stats)


def curated(out: Path) -> CurationResult:
    """The finished curation in ``out``; a clear error naming the folder when there is none."""
    result = read_curation(out)
    if result is None:
        raise RoundError(f"{out} holds no curated dataset (dataset.parquet and stats.json): run `automem curate` "
                         "(or the sft_dataset asset) on a training batch first")
    return result


async def curate_stage(batch: Path, scaffold: Scaffold, settings: ProficiencyConfig, meta: LLMClient | None,
                       storage: Storage, say: Callable[[str], None] | None = None,
                       out: Path | None = None, players: Clients | None = None) -> CurationResult:
    """The curated dataset of ``batch`` (into ``out``, else a folder derived from the batch): read
    back when it exists, else curated (DatasetTooSmall stops here). ``players``, the endpoints that
    played the batch, let curation replay its decisions (``settings.curation.replay``)."""
    out = Path(out) if out else dataset_dir(storage, batch)
    return read_curation(out) or await curate([Path(batch)], scaffold, eval_seeds(settings.game, storage.seeds_file),
                                              out, settings.curation_settings(), meta, say, players)


# --- stage 3: LoRA configuration ------------------------------------------------------------

async def lora_config_stage(data: CurationResult, settings: ProficiencyConfig, meta: LLMClient | None,
                            path: Path | None = None, max_rank: int | None = None) -> LoraChoice:
    """``lora_config.json`` (beside the dataset unless ``path`` says otherwise): given settings,
    else the meta-LLM's within bounds; a configuration already chosen is read back. ``max_rank``
    (``serving_rank_limit``) is the serving vLLM's ``--max-lora-rank``: no rank above it is
    chosen, and given or earlier settings above it are refused before hours of training."""
    from automem_dagster.training.base_model import describe_base

    path = path or Path(data.out_dir) / LORA_CONFIG_FILE
    if settings.training.lora is None and path.exists():
        choice = LoraChoice.load(path)
    elif settings.training.lora is not None:
        choice = LoraChoice(settings.training.lora, "given", "settings given by the user", settings.training.lora)
    else:
        base = describe_base(settings.training.training_base)
        defaults = default_settings(base["hidden_size"], max_length=min(2048, base["context"]))
        if max_rank is not None and defaults.rank > max_rank:
            defaults = defaults.model_copy(update={"rank": max_rank, "alpha": 2 * max_rank})
        choice = await recommend_lora(data.stats, base, defaults, meta, settings.budget.max_attempts, max_rank)
        choice.save(path)
    if max_rank is not None and choice.settings.rank > max_rank:
        raise RoundError(f"LoRA rank {choice.settings.rank} ({choice.source}, {path}) exceeds the serving vLLM's "
                         f"--max-lora-rank {max_rank}: the server would refuse the adapter. Give a rank of at most "
                         f"{max_rank} (or delete {path} to choose again), or restart vLLM with a larger --max-lora-rank "
                         "and raise max_lora_rank in the endpoints file")
    if settings.training.lora is not None:
        choice.save(path)
    return choice


# --- stage 4: training ----------------------------------------------------------------------

def adapter_dir(storage: Storage, game: str, adapter_id: str) -> Path:
    return storage.runs / "adapters" / slug(game) / adapter_id


def exported_adapter(folder: Path, scaffold_version: int) -> AdapterRecord:
    """An adapter trained outside the registry (``automem finetune --out``, the DVC stage) as a
    record ``specialist_endpoints`` can serve. Paths are taken from ``folder`` itself, not from
    ``training.json``, so an adapter pulled from a DVC remote into another checkout still resolves;
    its dataset is identified by the training run's fingerprint, which hashes the dataset's bytes."""
    folder = Path(folder)
    missing = [name for name in (RESULT_FILE, LORA_CONFIG_FILE, ADAPTER) if not (folder / name).exists()]
    if missing:
        raise RoundError(f"{folder} is not a trained adapter (missing {', '.join(missing)}): "
                         "run `automem finetune --out` (the DVC finetune stage) first")
    training = json.loads((folder / RESULT_FILE).read_text())
    gguf = folder / "adapter.gguf"
    return AdapterRecord(folder.name, scaffold_version, training["fingerprint"], training["dataset"],
                         str(folder / ADAPTER), str(gguf) if gguf.exists() else None,
                         LoraChoice.load(folder / LORA_CONFIG_FILE).source)


def train_into(data: CurationResult, choice: LoraChoice, settings: ProficiencyConfig, out: Path, progress=None):
    """Train (or resume) an adapter into ``out`` in a process of its own (``training.launch``) and, for
    the embedded base, export its GGUF (``out/adapter.gguf``); returns the trainer's result and the
    GGUF path (None otherwise)."""
    from automem_dagster.training.gguf_lora import export_gguf_lora
    from automem_dagster.training.launch import launch_training

    training = settings.training
    result = launch_training(Path(data.out_dir), choice.settings, out, base=training.training_base,
                             max_steps=training.max_train_steps, eval_every=training.eval_every, progress=progress)
    gguf = None
    if training.training_base == "embedded":
        gguf = str(export_gguf_lora(Path(result.adapter_dir), Path(out) / "adapter.gguf"))
    return result, gguf


def train_stage(data: CurationResult, choice: LoraChoice, scaffold: Scaffold, settings: ProficiencyConfig,
                storage: Storage, progress=None) -> AdapterRecord:
    """Train (or resume) the next adapter, export it for the embedded server, and register it as pending."""
    adapter_id = registry(storage, settings.family).next_id()
    result, gguf = train_into(data, choice, settings, adapter_dir(storage, settings.game, adapter_id), progress)
    record = AdapterRecord(adapter_id, scaffold.version, data.stats["dataset_hash"], data.out_dir,
                           str(result.adapter_dir), gguf, choice.source)
    register_adapter(storage, settings.family, record)
    return record


def register_adapter(storage: Storage, family: str, record: AdapterRecord) -> None:
    """Add ``record`` to ``family``'s registry as pending, refusing an id another round registered
    meanwhile; the training stage and DVC's finetune stage (``dvc_round.register_trained``) both come here."""
    with SpecialistRegistry.updating(family, storage.specialists) as current:
        current.add(record)


# --- stage 5: the two-model evaluation ------------------------------------------------------

def specialist_batch_dir(storage: Storage, game: str, version: int, seeds: list[int], max_steps: int,
                         adapter_id: str) -> Path:
    base = batch_dir(storage.runs, "evaluations", game, version, seeds, max_steps)
    return base.with_name(f"{base.name}-specialist-{adapter_id}")


def specialist_evaluation_specs(settings: ProficiencyConfig, scaffold: Scaffold, record: AdapterRecord,
                                storage: Storage) -> tuple[RolloutSpec, RolloutSpec]:
    """The two batches of a specialist evaluation: the new adapter's two-model agent, and the agent in
    service (``in_service``) on the same scaffold, seeds and steps: the two-model agent with the current
    specialist once one was kept, else the one-model agent (the structure loop's champion batch)."""
    budget = settings.budget
    seeds = settings.eval_seed_list(storage.seeds_file)

    def two_model(adapter: AdapterRecord) -> RolloutSpec:
        out = specialist_batch_dir(storage, settings.game, scaffold.version, seeds, budget.eval_max_steps, adapter.id)
        return RolloutSpec(settings.game, scaffold, seeds, budget.eval_max_steps, out, budget.concurrency)

    serving = in_service(storage, settings.family)
    return two_model(record), two_model(serving) if serving is not None else evaluation_spec(settings, scaffold, storage)


# --- stage 6: the decision ------------------------------------------------------------------

def load_specialist_verdict(storage: Storage, game: str, adapter_id: str) -> VerdictRecord | None:
    return load_verdict_record(storage, game, "specialist", adapter_id)


# --- the whole round ------------------------------------------------------------------------

@dataclass
class ProficiencyResult:
    """What a round produced; the rollout, dataset and config are None when a pending adapter was resumed."""

    game: str
    scaffold_version: int
    adapter: AdapterRecord
    rollout: BatchSummary | None = None
    dataset: CurationResult | None = None
    choice: LoraChoice | None = None
    training: dict | None = None
    specialist_eval: BatchSummary | None = None
    champion_eval: BatchSummary | None = None
    decision: VerdictRecord | None = None
    endpoints: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def training_record(record: AdapterRecord) -> dict:
    """The trainer's ``training.json`` of an adapter (losses, speed, memory)."""
    return json.loads((Path(record.adapter_dir).parent / RESULT_FILE).read_text())
