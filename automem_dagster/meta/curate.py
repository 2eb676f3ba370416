"""Curation: from training rollouts to the specialist's SFT dataset. Only what was measured trains.

Every eligible decision (``meta/decisions.py``: credited, well formed) is replayed with and without
it and kept only when its effect clears the credit floor (``meta/curation_review.py``); the cheap
score only orders that replay. Eligible decisions left unreplayed (a budget, no endpoints) are
``unmeasured`` and none of them trains, unless the curation opts in with ``keep_unmeasured``: then
they take the cheap score's verdict (at or above ``accept_score`` taken; between ``review_floor``
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
with its score, verdict and reason), ``review.json`` (every meta-LLM call) and ``stats.json``
(counts, score distribution, the kept effects, the replay's floor and cost, the calibration of the
cheap score on the replayed decisions and the dataset's content hash, its version), and ``card.md``
with ``effects.png`` (``meta/dataset_card.py``: the same in words, and the effects' histogram).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from automem_dagster.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from automem_dagster.datafiles import parse_json_reply
from automem_dagster.eta import eta
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.meta.calibration import agreement, effect_of, effect_summary
from automem_dagster.meta.counterfactual import ReplayBudget
from automem_dagster.meta.curation_review import measured_review
from automem_dagster.meta.dataset_card import calibration_words, write_card
from automem_dagster.meta.decisions import MemoryDecision, MemoryDecisionError, ScoreWeights, extract_decisions
from automem_dagster.meta.replies import Attempt, describe_reply
from automem_dagster.rollout.seeds import assert_disjoint
from automem_dagster.rollout.trajectory import finished_episodes, read_trajectory
from automem_dagster.scaffold import Scaffold

REVIEW_SYSTEM = """You are the meta-LLM of AutoMem. A game agent manages a file-based memory with \
operations (LOG phase: record what happened; PLAN phase: read memory before acting). You review \
its memory decisions for a training set that will teach a small model to manage memory. Keep a \
decision only if it records or consults information that helps later play: where a resource, \
exit or danger is, what worked or failed, a plan worth following. Drop noise: repeated or \
meaningless writes, reads of empty files, copying the observation verbatim, doing nothing when \
something important just happened. Reply with JSON only."""


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


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    keep: bool
    reason: str = Field(min_length=1, max_length=120)


class ReviewReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdicts: list[Verdict] = Field(min_length=1)


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
    _cheap_verdicts(decisions, settings)
    replay = await measured_review(decisions, scaffold, players, settings.replay, say)
    if settings.keep_unmeasured:
        for d in decisions:
            if d.verdict == "unmeasured":
                d.verdict = d.cheap_verdict
                d.reason = f"unmeasured (keep_unmeasured): cheap score {d.score.score:g}, verdict {d.cheap_verdict}"
    borderline = [d for d in decisions if d.verdict == "borderline"]
    attempts = await _review(borderline, settings, meta, say)
    kept = [d for d in decisions if d.verdict in ("accepted", "reviewed_kept")]
    kept = _balance(_dedupe(kept, settings.max_repeats), settings.episode_balance)
    rows = [_row(d, e) for d in kept for e in d.examples]
    assert_disjoint({r["seed"] for r in rows}, eval_seeds, "curated examples", "evaluation seeds")
    stats = _stats(decisions, kept, rows, excluded, settings)
    stats["replay"] = replay
    stats["calibration"] = agreement([d for d in decisions if d.replayed is not None])
    say(f"calibration of the cheap score: {calibration_words(stats['calibration'])}")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "decisions.jsonl", "".join(json.dumps(d.record()) + "\n" for d in decisions))
    write_json_atomic(out / "review.json", [asdict(a) for a in attempts])
    if len(rows) < settings.min_examples:
        write_json_atomic(out / "stats.json", stats)
        write_card(out, stats, f"{scaffold.game} v{scaffold.version} curation (too small to train on)")
        (out / "dataset.parquet").unlink(missing_ok=True)
        unmeasured = (f"; {replay['unmeasured']} eligible decisions were left unmeasured ({replay['unmeasured_why']}): "
                      "give the endpoints that played the batch, raise --replay-decisions, or opt in with "
                      "--keep-unmeasured" if replay["unmeasured"] and not settings.keep_unmeasured else "")
        raise DatasetTooSmall(
            f"curation kept {len(rows)} examples from {len(kept)} of {len(decisions)} decisions, fewer than the minimum of "
            f"{settings.min_examples}{unmeasured}: collect more training rollouts (more episodes or steps) or lower "
            f"min_examples; every decision and its verdict is in {out / 'decisions.jsonl'}"
        )
    stats["dataset_hash"] = write_dataset(out / "dataset.parquet", rows)
    write_json_atomic(out / "stats.json", stats)
    write_card(out, stats, f"{scaffold.game} v{scaffold.version} curated dataset {stats['dataset_hash']}")
    say(f"dataset: {len(rows)} examples from {len(kept)} decisions, version {stats['dataset_hash']}")
    return CurationResult(str(out), len(rows), stats)


def _cheap_verdicts(decisions: list[MemoryDecision], settings: CurationSettings) -> None:
    """Each decision's verdict by the cheap score alone, kept as ``cheap_verdict`` (the calibration against
    replayed effects compares them; an unmeasured decision kept by request takes it). The replay then
    replaces an eligible decision's verdict with its measured one, or ``unmeasured``."""
    for d in decisions:
        if d.score.malformed:
            d.verdict, d.reason = "rejected", "a turn of this decision was malformed"
        elif not d.score.credited:
            d.verdict, d.reason = "ineligible", ("uncredited: no write shown by a later PLAN read, "
                                                 "no read that showed a line")
        elif d.score.score >= settings.accept_score:
            d.verdict, d.reason = "accepted", f"score {d.score.score:g} >= {settings.accept_score:g}"
        elif d.score.score >= settings.review_floor:
            d.verdict, d.reason = "borderline", "between review_floor and accept_score"
        else:
            d.verdict, d.reason = "rejected", f"score {d.score.score:g} < {settings.review_floor:g}"
        d.cheap_verdict = d.verdict


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


async def _review(borderline: list[MemoryDecision], settings: CurationSettings, meta: LLMClient | None,
                  say: Say) -> list[Attempt]:
    """Let the meta-LLM judge borderline decisions, best scores first, in batches."""
    borderline.sort(key=lambda d: -d.score.score)
    attempts: list[Attempt] = []
    batches = [borderline[i:i + settings.review_batch] for i in range(0, len(borderline), settings.review_batch)]
    calls, started = min(len(batches), settings.max_review_batches), time.perf_counter()
    for number, batch in enumerate(batches):
        if meta is None or number >= settings.max_review_batches:
            why = "no meta endpoint" if meta is None else f"review budget of {settings.max_review_batches} calls spent"
            for d in batch:
                d.verdict, d.reason = "unreviewed", f"borderline, not reviewed ({why})"
            continue
        say(f"meta-LLM review {number + 1}/{calls} ({len(batch)} decisions), "
            f"eta {eta(number, calls, time.perf_counter() - started)}")
        verdicts, error, completion = await _review_batch(batch, meta)
        attempts.append(Attempt.of(completion, error))
        for i, d in enumerate(batch):
            v = verdicts.get(i)
            if v is None:
                d.verdict, d.reason = "reviewed_dropped", error or "the review gave no verdict for this decision"
            else:
                d.verdict, d.reason = ("reviewed_kept" if v.keep else "reviewed_dropped"), v.reason
    return attempts


def review_schema(decisions: int) -> dict:
    """The review reply's schema for a batch of ``decisions``: one verdict per decision id."""
    schema = ReviewReply.model_json_schema()
    schema["$defs"]["Verdict"]["properties"]["id"] = {"type": "integer", "enum": list(range(decisions))}
    schema["properties"]["verdicts"]["maxItems"] = decisions
    return to_strict(schema)


async def _review_batch(batch: list[MemoryDecision], meta: LLMClient):
    shown = "\n\n".join(_describe(i, d) for i, d in enumerate(batch))
    schema = review_schema(len(batch))
    messages = [{"role": "system", "content": REVIEW_SYSTEM},
                {"role": "user", "content": f"Decisions:\n\n{shown}\n\nGive a verdict (keep or not, with a short reason) "
                                            "for each decision id.\n" + describe_reply(schema)}]
    completion = await meta.complete(messages, json_schema=schema, schema_name="review")
    reply, error = parse_json_reply(completion.text, ReviewReply)
    if reply is None:
        return {}, f"review reply unusable: {error}", completion
    verdicts = {v.id: v for v in reply.verdicts if 0 <= v.id < len(batch)}
    return verdicts, None, completion


def _describe(i: int, d: MemoryDecision) -> str:
    s = d.score
    ops = "; ".join(d.ops) or "(no operation)"
    text = " | ".join(e["completion"][0]["content"].replace("\n", " ") for e in d.examples)
    observation = d.examples[0]["prompt"][1]["content"].rsplit("Now:", 1)[-1].strip()[:400]
    return (f"[{i}] {d.phase.upper()} at step {d.step}. Situation:\n{observation}\nIt wrote: {text[:300]}\n"
            f"Operations: {ops[:300]}\nAfterwards ({s.window} steps): {s.window_return:+.2f} {s.unit} against "
            f"{s.baseline:+.2f} at the episode's pace (advantage {s.advantage:+.2f}); writes {s.writes} "
            f"(shown by a later PLAN read {s.writes_used}), reads {s.reads} (showing lines {s.reads_with_content}), "
            f"redundant {s.redundant}, empty {s.empty}.")


def _dedupe(kept: list[MemoryDecision], max_repeats: int) -> list[MemoryDecision]:
    """Drop decisions whose examples all repeat already-kept ones exactly, and cap identical
    completions at ``max_repeats`` (the largest measured effects kept)."""
    seen: set[str] = set()
    repeats: Counter[str] = Counter()
    out = []
    for d in sorted(kept, key=_measured_first):
        keys = [_example_key(e) for e in d.examples]
        completion = "\n".join(e["completion"][0]["content"] for e in d.examples)
        if all(k in seen for k in keys):
            d.verdict, d.reason = "duplicate", "its examples repeat kept examples exactly"
        elif repeats[completion] >= max_repeats:
            d.verdict, d.reason = "duplicate", f"this completion is already kept {max_repeats} times"
        else:
            seen.update(keys)
            repeats[completion] += 1
            out.append(d)
    return out


def _balance(kept: list[MemoryDecision], balance: float) -> list[MemoryDecision]:
    by_episode: dict[str, list[MemoryDecision]] = defaultdict(list)
    for d in kept:
        by_episode[d.episode].append(d)
    if not by_episode:
        return []
    cap = max(1, math.ceil(balance * len(kept) / len(by_episode)))
    out = []
    for episode_decisions in by_episode.values():
        for rank, d in enumerate(sorted(episode_decisions, key=_measured_first)):
            if rank < cap:
                out.append(d)
            else:
                d.verdict, d.reason = "balanced_out", f"episode already contributes {cap} decisions"
    return sorted(out, key=lambda d: (d.episode, d.step, d.phase))


def _measured_first(d: MemoryDecision) -> tuple:
    """The order dedupe and balance keep decisions in: measured before unmeasured, largest effect first."""
    return (d.replayed is None, -effect_of(d)[0], d.episode, d.step, d.phase)


def _example_key(example: dict) -> str:
    return hashlib.sha256(json.dumps([example["prompt"], example["completion"]], sort_keys=True).encode()).hexdigest()


def _row(d: MemoryDecision, example: dict) -> dict:
    effect, unit, method, window = effect_of(d)
    return {"prompt": example["prompt"], "completion": example["completion"], "episode": d.episode, "seed": d.seed,
            "step": d.step, "phase": d.phase, "turn": example["turn"], "score": d.score.score,
            "effect": effect, "effect_unit": unit, "effect_method": method, "window": window}


def _stats(decisions: list[MemoryDecision], kept: list[MemoryDecision], rows: list[dict], excluded: list[dict],
           settings: CurationSettings) -> dict:
    scores = sorted(d.score.score for d in decisions)
    return {
        "settings": settings.model_dump(),
        "decisions": len(decisions),
        "by_phase": dict(Counter(d.phase for d in decisions)),
        "verdicts": dict(Counter(d.verdict for d in decisions)),
        "kept_decisions": len(kept),
        "examples": len(rows),
        "examples_by_phase": dict(Counter(r["phase"] for r in rows)),
        "examples_by_episode": dict(Counter(r["episode"] for r in rows)),
        "episodes": len({d.episode for d in decisions}),
        "excluded_episodes": excluded,
        "score": {"min": scores[0], "median": scores[len(scores) // 2], "max": scores[-1]} if scores else {},
        "credited_decisions": sum(d.score.credited for d in decisions),
        "eligible_decisions": sum(d.score.eligible for d in decisions),
        "kept_effects": effect_summary(kept),
        "unmeasured_kept": sum(d.replayed is None for d in kept),
        "kept_effect_values": [list(effect_of(d)[:3]) for d in kept],
        "mean_prompt_chars": round(sum(len(m["content"]) for r in rows for m in r["prompt"]) / len(rows)) if rows else 0,
        "mean_completion_chars": round(sum(len(r["completion"][0]["content"]) for r in rows) / len(rows)) if rows else 0,
    }


def write_dataset(path: Path, rows: list[dict]) -> str:
    """Write the examples as parquet (atomically) and return their content hash, the dataset's version."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    write_bytes_atomic(path, buffer.getvalue())
    return digest
