"""Run a batch of episodes, several at once, resumably.

Episodes are independent tasks on one event loop: while one waits for the model another
can step its game, so a server with parallel slots stays busy. Each lane (a place among the
episodes played at once) has its own game thread, and an episode makes, resets, steps and
closes its game on its lane's thread only: an NLE instance is not thread-safe, but independent
instances are (each loads its own copy of libnethack), and one thread for every game of a batch
made 64 episodes' steps queue behind each other (``benchmarks/rollout_scaling.py``).
A batch directory holds ``batch.json`` (what the batch is), ``trajectories/``
(finished episodes), ``memory/`` (each episode's sandboxed store and journal) and
``summary.json``. Rerunning the same batch skips finished episodes and resumes unfinished
ones at their last recorded step (``rollout.resume``: the recorded steps are replayed without
model calls and checked), so a killed batch resumes to the same set of trajectories.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from automem_dagster.agent import MemoryAgent
from automem_dagster.agent.baselines import Agent, ChainOfThoughtAgent, RandomAgent, WindowAgent
from automem_dagster.agent.memory_settings import settings_for
from automem_dagster.agent.oracle_agent import OracleAgent
from automem_dagster.agent.rag_agent import RagAgent
from automem_dagster.agent.summary_agent import SummaryAgent
from automem_dagster.atomic import write_json_atomic
from automem_dagster.cpu_ledger import LEDGER
from automem_dagster.games import env_ref, game_family, make_game
from automem_dagster.games.base import Game, StepResult, state_record
from automem_dagster.llm.replicas import episode_affinity
from automem_dagster.llm.rule_actor import RuleActor
from automem_dagster.llm.session import Clients
from automem_dagster.llm.slot_turns import lanes_for
from automem_dagster.memory import Journal, MemoryStore
from automem_dagster.memory.journal import JOURNAL_FILE
from automem_dagster.rollout.batch_spec import RolloutSpec, place_batch
from automem_dagster.rollout.failure import failure_message
from automem_dagster.rollout.identity import batch_identity, observed_replies
from automem_dagster.rollout.resume import (
    GameStep,
    Play,
    ResumeMismatch,
    discard,
    load_interrupted,
    memory_digest,
    replay,
    set_aside,
)
from automem_dagster.rollout.summary import BatchSummary, summarize_batch
from automem_dagster.rollout.trajectory import (
    BATCH_FILE,
    TrajectoryWriter,
    episode_id,
    partial_path,
    read_manifest,
    trajectory_path,
)
from automem_dagster.scaffold import content_hash

log = logging.getLogger(__name__)


class RolloutError(RuntimeError):
    """A batch that could not finish; finished episodes are kept and a rerun resumes."""


RULE_ACTED = ("memory", "window", "oracle", "random")
"""The agents the rule actor can play: those whose model calls only choose an action."""

Progress = Callable[[str, int, bool], None]
"""Called as ``progress(episode_id, steps_done, finished)`` when an episode starts (with the steps
it resumes at), after every step, and when it finishes (an episode finished before is reported
finished at once)."""


@runtime_checkable
class BatchProgress(Protocol):
    """A progress display that wants each batch's size up front (for one bar per batch with an
    ETA): ``run_batch`` calls ``batch`` once and reports the batch's episodes to what it returns."""

    def batch(self, name: str, episodes: int, max_steps: int) -> Progress: ...


async def _open_batch(spec: RolloutSpec, clients: Clients) -> tuple[RolloutSpec, dict]:
    """The batch's identity, the directory it is played in (``place_batch``) and its batch.json, written
    there (keeping what an earlier run of the same batch observed of its servers)."""
    identity = await batch_identity(spec, clients)
    out = place_batch(spec, identity)
    if (out / BATCH_FILE).exists():
        observed = (read_manifest(out).get("identity") or {}).get("observed")
        identity = {**identity, **({"observed": observed} if observed else {})}
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    spec = replace(spec, out_dir=out)
    manifest = {**spec.manifest(clients), "identity": identity}
    write_json_atomic(out / BATCH_FILE, manifest)
    return spec, manifest


async def run_batch(spec: RolloutSpec, clients: Clients,
                    progress: Progress | BatchProgress | None = None) -> BatchSummary:
    """Play every seed not finished yet and return the summary of the whole batch."""
    spec, manifest = await _open_batch(spec, clients)
    out = Path(spec.out_dir)
    todo = [s for s in spec.seeds if not trajectory_path(out, episode_id(spec.game, s)).exists()]
    if isinstance(progress, BatchProgress):
        label = f"{spec.game} v{spec.scaffold.version}" if spec.agent == "memory" else f"{spec.game} {spec.agent}"
        progress = progress.batch(label, len(spec.seeds), spec.max_steps)
    for seed in spec.seeds:
        if seed not in todo and progress:
            progress(episode_id(spec.game, seed), spec.max_steps, True)
    # Each running episode holds one lane (and through it one server slot) until it ends.
    count, fewer = lanes_for(max(1, spec.concurrency), clients)
    if fewer and todo:
        log.info(fewer)
    lanes: asyncio.Queue[int] = asyncio.Queue()
    for lane in range(count):
        lanes.put_nowait(lane)
    pools = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"game-{lane}") for lane in range(lanes.qsize())]
    try:

        async def guarded(seed: int) -> None:
            lane = await lanes.get()
            try:
                with episode_affinity(episode_id(spec.game, seed), (clients.game, clients.memory)):
                    await run_episode(spec, seed, clients, pools[lane], progress, lane)
            finally:
                lanes.put_nowait(lane)

        results = await asyncio.gather(*(guarded(s) for s in todo), return_exceptions=True)
    finally:
        for pool in pools:
            pool.shutdown()
    failures = [(seed, r) for seed, r in zip(todo, results, strict=True) if isinstance(r, BaseException)]
    observed = observed_replies(clients) if todo else {}
    if observed:  # a hosted API's word on what served the batch, known once it answered; the first one stays
        identity = manifest["identity"]
        write_json_atomic(out / BATCH_FILE, {**manifest, "identity": {
            **identity, "observed": {**observed, **identity.get("observed", {})}}})
    summary = summarize_batch(out)
    if failures:
        message = failure_message(out, spec.game, spec.seeds, failures, len(summary.episodes))
        raise RolloutError(message) from failures[0][1]
    return summary


async def run_episode(
    spec: RolloutSpec, seed: int, clients: Clients, pool: ThreadPoolExecutor, progress: Progress | None,
    lane: int | None = None,
) -> Path:
    """Play one episode to its end or ``max_steps`` (resuming an interrupted one at its last
    recorded step) and publish its trajectory."""
    loop = asyncio.get_running_loop()
    eid = episode_id(spec.game, seed)
    game = await loop.run_in_executor(pool, LEDGER.charged("setup")(make_game), spec.game, spec.max_steps)
    step = LEDGER.charged("game")(game.step)

    async def game_step(action: str) -> StepResult:
        return await loop.run_in_executor(pool, step, action)

    try:
        play, writer = await _open_episode(spec, seed, clients, game, pool, game_step, lane)
        if progress:
            progress(eid, play.step, False)
        try:
            while play.step < spec.max_steps and not play.result.done:
                await _play_step(play, writer, game_step)
                if progress:
                    progress(eid, play.step, False)
        except BaseException:
            writer.abandon()
            raise
        path = writer.finish({"steps": play.step, "progression": play.result.progression,
                              "total_reward": play.total_reward, "done": play.result.done,
                              "finished_at": datetime.now(UTC).isoformat()})
        if progress:
            progress(eid, play.step, True)
        return path
    finally:
        await loop.run_in_executor(pool, LEDGER.charged("setup")(game.close))


async def _play_step(play: Play, writer: TrajectoryWriter, game_step: GameStep) -> None:
    """One step with the model: the agent decides, the game moves, the step line is written."""
    started = time.perf_counter()
    shown = play.shown()
    play.begin_step()
    outcome = await play.agent.step(play.step, shown)
    game_started = time.perf_counter()
    result = await game_step(outcome.action)
    game_s = time.perf_counter() - game_started
    with LEDGER.phase("trajectory"):  # the step record built (state, digest) and written
        writer.step({
            "step": play.step, "observation": shown, "action": outcome.action,
            "action_valid": outcome.valid, "action_note": outcome.note,
            "reward": result.reward, "progression": result.progression, "done": result.done,
            "warnings": outcome.warnings, "turns": outcome.turn_records,
            **({"memory_index": outcome.memory_index} if outcome.memory_index else {}),
            **({"memory_context": outcome.memory_context} if outcome.memory_context else {}),
            **({"memory_sha": memory_digest(play.store)} if play.store is not None else {}),
            "state": state_record(result.state), "info": result.info,
            "game_s": game_s, "wall_s": time.perf_counter() - started,
        })
    play.end_step(outcome.action, outcome.valid, outcome.note, result)


async def _open_episode(spec: RolloutSpec, seed: int, clients: Clients, game: Game, pool: ThreadPoolExecutor,
                        game_step: GameStep, lane: int | None = None) -> tuple[Play, TrajectoryWriter]:
    """The episode at its last recorded step when an interrupted run left one that replays
    exactly, else at step 0 (with a note in the header when a resume was refused)."""
    eid = episode_id(spec.game, seed)
    path, mem_root = trajectory_path(spec.out_dir, eid), Path(spec.out_dir) / "memory" / eid
    header = {
        "episode": eid, "game": spec.game, "seed": seed, "max_steps": spec.max_steps, **spec.agent_settings(),
        "scaffold": {"game": spec.scaffold.game, "version": spec.scaffold.version, "hash": content_hash(spec.scaffold)},
        "endpoints": clients.describe(),
        "started_at": datetime.now(UTC).isoformat(),
    }
    if partial_path(path).exists() and not env_ref(spec.game).plugin.replays_exactly:
        header["resumes"] = [{"at_step": 0, "note": f"not resumed: {env_ref(spec.game).family} does not replay "
                                                    "exactly (its plugin says so); the episode was played again from step 0"}]
    elif partial_path(path).exists():
        aside = set_aside(mem_root)
        try:
            interrupted = load_interrupted(partial_path(path), aside, eid, spec.agent == "memory")
            play = await _fresh_play(spec, seed, clients, game, pool, mem_root, lane)
            await replay(play, interrupted, game_step)
        except ResumeMismatch as exc:
            note = f"not resumed: {exc}; the episode was played again from step 0"
            log.warning("%s: %s", eid, note)
            header["resumes"] = [{"at_step": 0, "note": note}]
        else:
            shutil.rmtree(aside, ignore_errors=True)
            if interrupted.steps:
                log.info("%s: resumed at step %d; the recorded steps were replayed without model calls",
                         eid, play.step)
            resumes = [*interrupted.header.get("resumes", []), {"at_step": play.step, "at": header["started_at"]}]
            return play, TrajectoryWriter(path, {**interrupted.header, "resumes": resumes}, interrupted.steps)
    discard(mem_root)
    play = await _fresh_play(spec, seed, clients, game, pool, mem_root, lane)
    return play, TrajectoryWriter(path, header)


async def _fresh_play(spec: RolloutSpec, seed: int, clients: Clients, game: Game, pool: ThreadPoolExecutor,
                      mem_root: Path, lane: int | None = None) -> Play:
    """A new agent (with an empty store under ``mem_root``) and the game reset to ``seed``."""
    result = await asyncio.get_running_loop().run_in_executor(pool, LEDGER.charged("setup")(game.reset), seed)
    with LEDGER.phase("setup"):  # after the reset: a suite's actions are those of the task the seed picks
        shutil.rmtree(mem_root, ignore_errors=True)
        agent = make_agent(spec, seed, game, clients, mem_root, lane)
    return Play(agent, agent.store if isinstance(agent, MemoryAgent) else None, result)


def make_agent(spec: RolloutSpec, seed: int, game: Game, clients: Clients, mem_root: Path,
               lane: int | None = None) -> Agent:
    """The agent of one episode: the memory agent with a fresh store under ``mem_root``, or a baseline."""
    if spec.agent == "memory":
        mem_root.mkdir(parents=True)
        store = MemoryStore(mem_root / "files", journal=Journal(mem_root / JOURNAL_FILE))
        return MemoryAgent(spec.scaffold, store, game.actions(), game.parse_action, clients.game, clients.memory,
                           episode_seed=seed, lane=lane)
    if spec.agent == "random":
        return RandomAgent(game.actions(), seed)
    if clients.game is None:
        raise RolloutError(f"the {spec.agent} baseline needs a game endpoint: pass --endpoints with a `game:` entry")
    if isinstance(clients.game, RuleActor) and spec.agent not in RULE_ACTED:
        raise RolloutError(f"the rule actor (actor: rules) chooses actions only: it plays the {', '.join(RULE_ACTED)} "
                           f"agents, not {spec.agent}; use an endpoints file without `actor: rules` for it")
    family, settings = game_family(spec.game), settings_for(spec.agent, spec.settings)
    if spec.agent == "oracle":
        notes = getattr(game, "oracle_notes", None)
        if notes is None:
            raise RolloutError(f"the oracle baseline needs the game to name its needed facts: {spec.game} does not "
                               "(the memory games keydoor and courier do)")
        return OracleAgent(notes(), family, game.actions(), game.parse_action, clients.game, spec.window,
                           episode_seed=seed)
    if spec.agent == "rag":
        embed = clients.embed if settings.retriever == "embedding" else None
        if settings.retriever == "embedding" and embed is None:
            raise RolloutError("the rag baseline's embedding retriever needs an embed endpoint; the session was "
                               "opened without one (connect(..., embed=True))")
        return RagAgent(family, game.actions(), game.parse_action, clients.game, spec.window, settings, embed,
                        episode_seed=seed)
    if spec.agent == "summary":
        return SummaryAgent(family, game.actions(), game.parse_action, clients.game, spec.window, settings,
                            episode_seed=seed)
    kind = WindowAgent if spec.agent == "window" else ChainOfThoughtAgent
    return kind(family, game.actions(), game.parse_action, clients.game, spec.window, episode_seed=seed)
