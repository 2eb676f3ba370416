"""Curation: from training rollouts to the specialist's SFT dataset. Only what was measured trains.

Every eligible decision (``meta/decisions.py``: credited, well formed) is replayed with and without
it and kept only when its effect clears the credit floor (``meta/curation_review.py``); the cheap
score only orders that replay. Eligible decisions left unreplayed (a budget, no endpoints) are
``unmeasured`` and none of them trains, unless the curation opts in with ``keep_unmeasured``: then
they take the cheap score's fate (at or above ``accept_score`` taken; between ``review_floor``
and ``accept_score`` borderline, sent to the meta-LLM in batches, which keeps or drops each with a
reason), and every such row, the card and the training run's MLflow record say "unmeasured". Then
identical examples are removed, no completion may repeat more than ``max_repeats`` times (a dataset
of a thousand ``<|DONE|>`` teaches nothing), and no episode may contribute more than
``episode_balance`` times its fair share, the largest measured effects kept first. Episodes on
evaluation seeds never enter: they are excluded before extraction and the finished dataset is
checked again. Below ``min_examples`` curation stops with ``DatasetTooSmall`` after writing its audit
files, because training on too little teaches the specialist noise.

The dataset folder holds ``dataset.parquet`` (trl's conversational prompt/completion format plus
provenance: episode, seed, step, phase, turn, score, and the decision's effect with its unit, how it
was measured, ``replayed`` or ``unmeasured``, and its window), ``decisions.jsonl`` (every decision
with its score, fate (``meta/fate.py``) and reason), ``review.json`` (every meta-LLM call) and ``stats.json``
(counts, score distribution, the kept effects, the replay's floor and cost, the calibration of the
cheap score on the replayed decisions and the dataset's content hash, its version), and ``card.md``
with ``effects.png`` (``meta/dataset_card.py``: the same in words, and the effects' histogram).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from automem_dagster.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.meta.calibration import agreement, effect_of, effect_summary
from automem_dagster.meta.counterfactual import ReplayBudget
from automem_dagster.meta.curation_caps import balance, dedupe
from automem_dagster.meta.curation_review import measured_review
from automem_dagster.meta.dataset_card import calibration_words, write_card
from automem_dagster.meta.decisions import (
    MemoryDecision,
    MemoryDecisionError,
    ScoreWeights,
    cheap_fate,
    extract_decisions,
)
from automem_dagster.meta.fate import KEPT, Fate, Fated
from automem_dagster.meta.meta_review import review_borderline
from automem_dagster.rollout.seeds import assert_disjoint
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from automem_dagster.scaffold import Scaffold
from automem_dagster.training.sft_result import DATASET_FILE
from automem_dagster.training.sft_row import SFTRow

STATS_FILE = "stats.json"
DECISIONS_FILE = "decisions.jsonl"
REVIEW_FILE = "review.json"


class CurationSettings(BaseModel):
    """Thresholds of one curation; The AutoMem paper's minimum sizes are 300 (MiniHack) to 800 (NetHack)."""

    model_config = ConfigDict(extra="forbid")

    weights: ScoreWeights = Field(default_factory=ScoreWeights)
    accept_score: float = Field(1.0, description="taken without review at or above this score")
    review_floor: float = Field(0.0, description="below this score a decision is dropped without review")
    max_repeats: int = Field(5, ge=1, description="most examples with one identical completion")
    episode_balance: float = Field(2.0, ge=1.0, description="most decisions per episode, as a multiple of the mean")
    min_examples: int = Field(300, ge=1)
    review_batch: int = Field(8, ge=1, le=32)
    max_review_batches: int = Field(10, ge=0, description="meta-LLM calls at most; borderline decisions beyond them are dropped")
    replay: ReplayBudget = Field(default_factory=ReplayBudget)
    keep_unmeasured: bool = Field(False, description="also keep eligible decisions the replay did not measure, by "
                                                     "the cheap score (their rows, the card and the run say so)")

    @model_validator(mode="after")
    def _ordered(self) -> CurationSettings:
        if self.review_floor > self.accept_score:
            raise ValueError(f"review_floor {self.review_floor} is above accept_score {self.accept_score}")
        return self


class DatasetTooSmall(RuntimeError):
    """Curation found fewer good examples than the minimum; nothing is trained."""


class CurationError(RuntimeError):
    """Curation could not run at all (no trajectories, all unusable); the message says what to do."""


@dataclass
class CurationResult:
    out_dir: str
    examples: int
    stats: dict


Say = Callable[[str], None]


async def curate(batches: list[Path], scaffold: Scaffold, eval_seeds: list[int], out_dir: Path,
                 settings: CurationSettings | None = None, meta: LLMClient | None = None,
                 progress: Say | None = None, players: Clients | None = None) -> CurationResult:
    """Curate the finished episodes of ``batches`` into ``out_dir`` (see the module doc). ``players``
    are the endpoints that played the batches, which the replay plays again; without them no decision
    is measured, so nothing trains unless ``settings.keep_unmeasured``."""
    settings = settings or CurationSettings()
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    decisions, excluded = _collect(batches, scaffold, set(eval_seeds), settings.weights)
    say(f"{len(decisions)} memory decisions from {len({d.episode for d in decisions})} episodes "
        f"({len(excluded)} episodes excluded), {sum(d.score.eligible for d in decisions)} eligible")
    cheap = {d.id: cheap_fate(d.score, settings.accept_score, settings.review_floor) for d in decisions}
    for d in decisions:
        d.cheap_fate = cheap[d.id].fate
    _settle(decisions, cheap)
    replay, measured = await measured_review(decisions, scaffold, players, settings.replay, say)
    _settle(decisions, measured)
    if settings.keep_unmeasured:
        _settle(decisions, {d.id: _unmeasured_kept(d, cheap[d.id]) for d in decisions if d.fate is Fate.UNMEASURED})
    borderline = [d for d in decisions if d.fate is Fate.BORDERLINE]
    attempts, reviewed = await review_borderline(borderline, settings.review_batch, settings.max_review_batches, meta, say)
    _settle(decisions, reviewed)
    kept, duplicates = dedupe([d for d in decisions if d.fate in KEPT], settings.max_repeats)
    kept, balanced_out = balance(kept, settings.episode_balance)
    _settle(decisions, {**duplicates, **balanced_out})
    rows = [_row(d, e) for d in kept for e in d.examples]
    assert_disjoint({r.seed for r in rows}, eval_seeds, "curated examples", "evaluation seeds")
    stats = _stats(decisions, kept, rows, excluded, settings)
    stats["replay"] = replay
    stats["calibration"] = agreement([d for d in decisions if d.replayed is not None])
    say(f"calibration of the cheap score: {calibration_words(stats['calibration'])}")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / DECISIONS_FILE, "".join(json.dumps(d.record()) + "\n" for d in decisions))
    write_json_atomic(out / REVIEW_FILE, [asdict(a) for a in attempts])
    if len(rows) < settings.min_examples:
        write_json_atomic(out / STATS_FILE, stats)
        write_card(out, stats, f"{scaffold.game} v{scaffold.version} curation (too small to train on)")
        (out / DATASET_FILE).unlink(missing_ok=True)
        unmeasured = (f"; {replay['unmeasured']} eligible decisions were left unmeasured ({replay['unmeasured_why']}): "
                      "give the endpoints that played the batch, raise --replay-decisions, or opt in with "
                      "--keep-unmeasured" if replay["unmeasured"] and not settings.keep_unmeasured else "")
        raise DatasetTooSmall(
            f"curation kept {len(rows)} examples from {len(kept)} of {len(decisions)} decisions, fewer than the minimum of "
            f"{settings.min_examples}{unmeasured}: collect more training rollouts (more episodes or steps) or lower "
            f"min_examples; every decision and its fate is in {out / DECISIONS_FILE}"
        )
    stats["dataset_hash"] = write_dataset(out / DATASET_FILE, rows)
    write_json_atomic(out / STATS_FILE, stats)
    write_card(out, stats, f"{scaffold.game} v{scaffold.version} curated dataset {stats['dataset_hash']}")
    say(f"dataset: {len(rows)} examples from {len(kept)} decisions, version {stats['dataset_hash']}")
    return CurationResult(str(out), len(rows), stats)


def _settle(decisions: list[MemoryDecision], fates: dict[str, Fated]) -> None:
    """Give each decision named in ``fates`` (by its id) the fate a stage returned: the one place fates change."""
    for d in decisions:
        if d.id in fates:
            d.fate, d.reason = fates[d.id]


def _unmeasured_kept(d: MemoryDecision, cheap: Fated) -> Fated:
    """An unmeasured decision kept by opt-in (``keep_unmeasured``) takes its cheap score's fate."""
    return Fated(cheap.fate, f"unmeasured (keep_unmeasured): cheap score {d.score.score:g}, fate {cheap.fate.value}")


def _collect(batches: list[Path], scaffold: Scaffold, eval_seeds: set[int],
             weights: ScoreWeights) -> tuple[list[MemoryDecision], list[dict]]:
    decisions, excluded = [], []
    paths = [p for b in batches for p in finished_episodes(b)]
    if not paths:
        raise CurationError(f"no finished trajectories in {', '.join(map(str, batches))}: run the training rollouts first")
    for path in paths:
        try:
            header = read_trajectory(path)[0]
            if int(header["seed"]) in eval_seeds:
                excluded.append({"trajectory": str(path), "reason": f"seed {header['seed']} is an evaluation seed"})
                continue
            decisions += extract_decisions(path, scaffold, weights)
        except MemoryDecisionError as exc:
            excluded.append({"trajectory": str(path), "reason": str(exc)})
    if not decisions:
        reasons = "; ".join(e["reason"] for e in excluded[:3])
        raise CurationError(f"no usable episode among {len(paths)} trajectories ({reasons})")
    return decisions, excluded


def _row(d: MemoryDecision, example: dict) -> SFTRow:
    effect, unit, method, window = effect_of(d)
    return SFTRow(prompt=example["prompt"], completion=example["completion"], episode=d.episode, seed=d.seed,
                  step=d.step, phase=d.phase, turn=example["turn"], score=d.score.score,
                  effect=effect, effect_unit=unit, effect_method=method, window=window)


def _stats(decisions: list[MemoryDecision], kept: list[MemoryDecision], rows: list[SFTRow], excluded: list[dict],
           settings: CurationSettings) -> dict:
    scores = sorted(d.score.score for d in decisions)
    return {
        "settings": settings.model_dump(),
        "decisions": len(decisions),
        "by_phase": dict(Counter(d.phase for d in decisions)),
        "fates": dict(Counter(d.fate.value for d in decisions)),
        "kept_decisions": len(kept),
        "examples": len(rows),
        "examples_by_phase": dict(Counter(r.phase for r in rows)),
        "examples_by_episode": dict(Counter(r.episode for r in rows)),
        "episodes": len({d.episode for d in decisions}),
        "excluded_episodes": excluded,
        "score": {"min": scores[0], "median": scores[len(scores) // 2], "max": scores[-1]} if scores else {},
        "credited_decisions": sum(d.score.credited for d in decisions),
        "eligible_decisions": sum(d.score.eligible for d in decisions),
        "kept_effects": effect_summary(kept),
        "unmeasured_kept": sum(d.replayed is None for d in kept),
        "kept_effect_values": [list(effect_of(d)[:3]) for d in kept],
        "mean_prompt_chars": round(sum(len(m.content) for r in rows for m in r.prompt) / len(rows)) if rows else 0,
        "mean_completion_chars": round(sum(len(r.completion[0].content) for r in rows) / len(rows)) if rows else 0,
    }


def write_dataset(path: Path, rows: list[SFTRow]) -> str:
    """Write the examples as parquet (atomically) and return their content hash, the dataset's version."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [r.model_dump() for r in rows]
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    write_bytes_atomic(path, buffer.getvalue())
    return digest
