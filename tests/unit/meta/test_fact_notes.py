"""``meta.fact_notes``: a needed fact counts as written only when the LOG of the step that shows it wrote
its answer and no other way, a fact never shown counts neither way, and the horizon reaches every fact."""

import builders
import pytest

from automem_dagster.games import make_game
from automem_dagster.meta.fact_notes import FactNotesError, batch_fact_rate, episode_fact_notes, fact_horizon
from automem_dagster.rollout.trajectory import TrajectoryWriter, episode_id, trajectory_path

GAME = "keydoor:hall4-decoys2"


def op(text, ok=True):
    return {"op": text, "ok": ok, "result": "appended" if ok else "refused", "redundant": False, "empty": False,
            "changed": ok}


def write_episode(batch, seed, log_at_sign, steps=2, game=GAME):
    """An episode walking on from the start, with ``log_at_sign`` (the LOG's ops) at step 1."""
    played = make_game(game)
    observations = [played.reset(seed).observation]
    observations += [played.step("forward").observation for _ in range(steps - 1)]
    eid = episode_id(game, seed)
    writer = TrajectoryWriter(trajectory_path(batch, eid), {"episode": eid, "game": game, "seed": seed,
                                                            "max_steps": steps, "agent": "memory"})
    for t, observation in enumerate(observations):
        turns = [builders.turn("log", "", log_at_sign, endpoint="memory")] if t == 1 else []
        writer.step({"step": t, **builders.step("forward", turns, observation=observation)})
    writer.finish({"steps": steps, "progression": 0.0, "total_reward": 0.0, "done": False})


def wing(seed):
    played = make_game(GAME)
    played.reset(seed)
    return played.needed_facts()[0].answer


def other(way):
    return "east" if way == "west" else "west"


@pytest.mark.parametrize(("text", "ok", "written"), [
    ("<|APPEND|>notes.txt|key: {WING} wing", True, True),
    ("<|UPSERT|>notes.txt|key|{WING}", True, True),  # the key and the text both count
    ("<|APPEND|>notes.txt|key: {WING} wing", False, False),  # the store refused it: nothing was kept
    ("<|APPEND|>notes.txt|key: {OTHER} wing", True, False),
    ("<|APPEND|>notes.txt|the key is west or east", True, False),  # names both ways: no answer kept
    ("<|APPEND|>notes.txt|a sign crumbled", True, False),
])
def test_a_fact_is_written_when_the_sign_s_log_names_its_answer_alone(tmp_path, text, ok, written):
    seed = 42
    note = text.format(WING=wing(seed).upper(), OTHER=other(wing(seed)))
    write_episode(tmp_path, seed, [op(note, ok)])
    [fact] = episode_fact_notes(trajectory_path(tmp_path, episode_id(GAME, seed)))
    assert (fact.shown_at, fact.subject, fact.answer, fact.written) == (1, "the key", wing(seed), written)


def test_the_batch_rate_pairs_seeds_and_skips_facts_never_shown(tmp_path):
    write_episode(tmp_path, 42, [op(f"<|APPEND|>notes.txt|{wing(42)}")])
    write_episode(tmp_path, 43, [])
    write_episode(tmp_path, 44, [], steps=1)  # ended at the start: the sign was never shown
    rate = batch_fact_rate(tmp_path)
    assert (rate.written, rate.shown, rate.per_seed) == (1, 2, {42: 1.0, 43: 0.0})
    assert rate.summary.mean == pytest.approx(50.0)


def test_a_batch_that_never_reached_a_fact_is_refused_by_name(tmp_path):
    write_episode(tmp_path, 44, [], steps=1)
    with pytest.raises(FactNotesError, match="no episode of .* lasted until a needed fact"):
        batch_fact_rate(tmp_path)


def test_the_horizon_reaches_every_needed_fact():
    assert fact_horizon("keydoor:hall8-decoys3", [42, 43]) == 2  # the sign: step 1
    assert fact_horizon("courier:walk3-parcels4", [42]) == 5  # four labels: steps 1 to 4
    with pytest.raises(FactNotesError, match="names no needed facts"):
        fact_horizon("crafter", [42])
