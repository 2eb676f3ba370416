"""Memory-decision extraction and curation on constructed trajectories (no model)."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest
from builders import turn
from curation_episodes import INDEX, SCAFFOLD, constructed_steps, op, settings, step, write_episode

from automem_dagster.agent import prompts
from automem_dagster.eta import eta, format_duration
from automem_dagster.meta.curate import CurationError, DatasetTooSmall, curate
from automem_dagster.meta.dataset_card import calibration_words
from automem_dagster.meta.decisions import MemoryDecisionError, ScoreWeights, extract_decisions

P = 100 / 22  # one Crafter achievement, in progression points


def test_extraction_yields_exactly_the_expected_decisions_and_scores(tmp_path):
    path = write_episode(tmp_path, 1234)
    decisions = extract_decisions(path, SCAFFOLD, ScoreWeights(horizon=2))
    got = {(d.step, d.phase): d for d in decisions}
    assert sorted(got) == [(0, "plan"), (1, "log"), (1, "plan"), (2, "log"), (2, "plan"),
                           (3, "log"), (3, "plan"), (4, "log"), (4, "plan")]
    scores = {k: d.score.score for k, d in got.items()}
    # One achievement in 5 steps: the episode's pace gains 2/5 of it over a window of K = 2 steps.
    advantage = P - 2 * P / 5
    assert scores[(0, "plan")] == pytest.approx(advantage, abs=1e-3)   # a read with content, then an achievement
    assert scores[(1, "log")] == pytest.approx(advantage, abs=1e-3)    # a write that the same step's PLAN showed
    assert scores[(1, "plan")] == pytest.approx(advantage, abs=1e-3)
    assert scores[(2, "log")] == 0                           # a write never read: no credit for what followed
    assert scores[(2, "plan")] == -1                         # an empty search
    assert scores[(3, "log")] == -1                          # a redundant write
    assert scores[(3, "plan")] == 0                          # action only: nothing consulted
    assert scores[(4, "log")] == -2                          # a malformed turn
    assert got[(1, "log")].score.writes_used == 1 and got[(2, "log")].score.writes_used == 0
    assert [k for k, d in got.items() if d.score.eligible] == [(0, "plan"), (1, "log"), (1, "plan")]
    assert got[(4, "plan")].score.window == 1 and not got[(4, "plan")].score.full_window   # cut by the end
    assert {d.score.unit for d in decisions} == {"progression"}


def scored(steps, horizon=2):
    """The decisions of an episode made of ``steps``, by (step, phase)."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as folder:
        path = write_episode(Path(folder), 1234, steps)
        return {(d.step, d.phase): d.score for d in extract_decisions(path, SCAFFOLD, ScoreWeights(horizon=horizon))}


def plan_read(text, result, empty=False):
    return turn("plan", text, [op(text, result, empty=empty)])


def act(reward=0.0, progression=0.0, turns=()):
    return step("noop", reward, progression, [*turns, turn("plan", "<|ACTION|>noop<|END|>")])


def test_an_empty_file_read_and_a_substring_only_write_are_not_credited():
    got = scored([
        act(turns=[plan_read("<|READ|>map_notes.txt", "map_notes.txt is empty (0 lines)")]),     # an old record
        act(turns=[plan_read("<|TAIL|>map_notes.txt|3", "map_notes.txt is empty (0 lines)", empty=True)]),
        step("noop", 0.0, 0.0, [turn("log", "<|APPEND|>map_notes.txt|ok\n<|DONE|>",
                                     [op("<|APPEND|>map_notes.txt|ok", "appended a line", changed=True)]),
                                plan_read("<|READ|>strategy.txt", "strategy.txt (1 lines):\nlook for wood"),
                                turn("plan", "<|ACTION|>noop<|END|>")]),
        step("noop", 0.0, 0.0, [turn("log", "<|APPEND|>map_notes.txt|tree east\n<|DONE|>",
                                     [op("<|APPEND|>map_notes.txt|tree east", "appended a line", changed=True)]),
                                plan_read("<|READ|>actions_log.txt", "actions_log.txt (1 lines):\ntree east"),
                                turn("plan", "<|ACTION|>noop<|END|>")]),
        step("noop", 0.0, 0.0, [turn("log", "<|UPSERT|>map_notes.txt|tree|2 west\n<|DONE|>",
                                     [op("<|UPSERT|>map_notes.txt|tree|2 west", "added key 'tree'", changed=True)]),
                                plan_read("<|READ|>map_notes.txt", "map_notes.txt (2 lines):\ntree west\ntree: 2 west"),
                                turn("plan", "<|ACTION|>noop<|END|>")]),
        act(1.0, 1 / 22),
    ])
    assert not got[(0, "plan")].credited and not got[(1, "plan")].credited      # "(0 lines)" shows no line
    assert got[(1, "plan")].empty == 1
    assert not got[(2, "log")].credited          # "ok" is in "look for wood", but not a line of map_notes.txt
    assert not got[(3, "log")].credited          # the very line, but shown as a line of another file
    assert got[(4, "log")].credited and got[(4, "plan")].credited              # the line, in its own file


def test_a_write_read_beyond_the_score_window_is_credited_with_its_last_read():
    """Eligibility by what a later read showed, at any distance (the replay plays to the last read)."""
    note = step("noop", 0.0, 0.0, [turn("log", "<|APPEND|>map_notes.txt|tree east\n<|DONE|>",
                                        [op("<|APPEND|>map_notes.txt|tree east", "appended a line", changed=True)]),
                                   turn("plan", "<|ACTION|>noop<|END|>")])
    shown = plan_read("<|READ|>map_notes.txt", "map_notes.txt (1 lines):\ntree east")
    got = scored([note, act(), act(), act(), act(turns=[shown]), act(), act(turns=[shown]), act()], horizon=2)
    assert got[(0, "log")].credited and got[(0, "log")].eligible and got[(0, "log")].last_read == 6
    assert got[(0, "log")].window == 2            # the cheap score still reads its window of 2 only
    assert got[(4, "plan")].last_read == 4        # a read's content is last read at its own step
    assert got[(1, "plan")].last_read is None and not got[(1, "plan")].eligible


def test_create_and_count_credit_nothing():
    got = scored([
        act(turns=[turn("plan", "<|CREATE|>notes.txt", [op("<|CREATE|>notes.txt", "created notes.txt (empty)",
                                                          changed=True)])]),
        act(turns=[plan_read("<|COUNT|>map_notes.txt|tree", "2 lines in map_notes.txt contain 'tree'")]),
        act(1.0, 1 / 22), act(1.0, 1 / 22),
    ])
    assert not got[(0, "plan")].credited and not got[(1, "plan")].credited
    assert got[(0, "plan")].score == got[(1, "plan")].score == 0


def test_a_constant_time_penalty_cancels_and_an_achievement_counts_once():
    reading = [plan_read("<|READ|>strategy.txt", "strategy.txt (1 lines):\nCollect wood")]
    penalised = scored([act(-0.01, turns=reading) for _ in range(4)])
    assert all(s.unit == "reward" for s in penalised.values())
    assert penalised[(0, "plan")].credited and penalised[(0, "plan")].advantage == 0   # the penalty is the pace
    # Crafter: an achievement is progression and a reward of 1; the score counts the progression only.
    crafter = scored([act(turns=reading), act(1.0, 1 / 22), act(0.0, 1 / 22), act(0.0, 1 / 22)])
    assert crafter[(0, "plan")].unit == "progression"
    assert crafter[(0, "plan")].window_return == pytest.approx(P, abs=1e-3)
    assert crafter[(0, "plan")].advantage == pytest.approx(P - 2 * P / 4, abs=1e-3)


def test_examples_rebuild_the_specialists_prompts(tmp_path):
    path = write_episode(tmp_path, 1234)
    got = {(d.step, d.phase): d for d in extract_decisions(path, SCAFFOLD, ScoreWeights(horizon=2))}
    system = prompts.system_prompt(SCAFFOLD, {}, "memory")
    plan = got[(0, "plan")].examples
    assert [e["completion"][0]["content"] for e in plan] == ["<|READ|>strategy.txt", "<|DONE|>"]
    assert plan[0]["prompt"][0] == {"role": "system", "content": system}
    assert plan[0]["prompt"][1]["content"].endswith(prompts.plan_phase("memory"))
    assert "<|ACTION|>" not in json.dumps([e["completion"] for d in got.values() for e in d.examples])
    # The second turn sees the first turn and its result, as the agent's conversation did.
    assert plan[1]["prompt"][2:] == [
        {"role": "assistant", "content": "<|READ|>strategy.txt"},
        {"role": "user", "content": "Results:\n<|READ|>strategy.txt -> strategy.txt (1 lines):\nCollect wood"},
    ]
    log = got[(1, "log")].examples[0]["prompt"][1]["content"]
    assert "Your previous action was move_left" in log and log.endswith(prompts.LOG_PHASE)
    context = prompts.StepContext(1, "obs before do", INDEX, [("move_left", 0.0)], [], prompts.LOG_PHASE)
    assert log == prompts.phase_messages(system, SCAFFOLD, context)[1]["content"]


def test_a_phase_prompt_is_these_bytes():
    """The user message the agent sends and curation trains on, to the byte: the previous action is
    the last of the whole history, only the scaffold's ``history_length`` recent ones are listed, and
    the index is annotated with each file's purpose. A change here changes every prompt (and the
    server's prompt cache), so it must be deliberate."""
    scaffold = SCAFFOLD.model_copy(update={"limits": SCAFFOLD.limits.model_copy(update={"history_length": 2})})
    history = [("noop", 0.0), ("move_left", 1.0), ("do", 0.0)]
    context = prompts.StepContext(3, "obs", INDEX, history, ["stuck: x"], prompts.LOG_PHASE)
    assert prompts.phase_messages("SYS", scaffold, context) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": (
            "Step 3. Your previous action was do (reward +0). Now:\n\nobs\n\nRecent actions: move_left (+1), do\n\n"
            "Warnings:\n- stuck: x\n\nMemory files:\nactions_log.txt (0 lines) - recent actions and their outcomes\n"
            "map_notes.txt (0 lines) - " + next(f.purpose for f in SCAFFOLD.files if f.name == "map_notes.txt")
            + "\n\n" + prompts.LOG_PHASE)},
    ]


def test_extraction_refuses_unusable_trajectories(tmp_path):
    limits = SCAFFOLD.limits.model_copy(update={"plan_max_ops": 3})
    other = SCAFFOLD.model_copy(update={"version": 1, "parent": 0, "limits": limits})
    with pytest.raises(MemoryDecisionError, match="not with crafter v1"):
        extract_decisions(write_episode(tmp_path / "a", 1, scaffold=SCAFFOLD), other)
    with pytest.raises(MemoryDecisionError, match="baseline"):
        extract_decisions(write_episode(tmp_path / "b", 1, agent="window"), SCAFFOLD)
    old = constructed_steps()
    del old[2]["memory_index"]
    with pytest.raises(MemoryDecisionError, match="no memory_index"):
        extract_decisions(write_episode(tmp_path / "c", 1, old), SCAFFOLD)
    path = write_episode(tmp_path / "d", 1)
    path.write_text(path.read_text()[:-20])
    with pytest.raises(MemoryDecisionError, match="corrupted|incomplete"):
        extract_decisions(path, SCAFFOLD)


def test_curation_keeps_good_decisions_and_never_an_eval_seed(tmp_path):
    batch = tmp_path / "batch"
    write_episode(batch, 1234)
    write_episode(batch, 42)          # an evaluation seed: must never reach the dataset
    result = asyncio.run(curate([batch], SCAFFOLD, [42, 43], tmp_path / "data", settings()))
    table = pq.read_table(tmp_path / "data" / "dataset.parquet").to_pylist()
    assert {r["seed"] for r in table} == {1234}
    assert {(r["step"], r["phase"]) for r in table} == {(0, "plan"), (1, "log"), (1, "plan")}
    assert result.examples == len(table) == 5     # two-turn plans give two examples each
    advantage = P - 2 * P / 5
    assert {(r["effect_method"], r["effect_unit"], r["window"]) for r in table} == {("unmeasured", "progression", 2)}
    assert all(r["effect"] == pytest.approx(advantage, abs=1e-3) for r in table)
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["excluded_episodes"][0]["reason"] == "seed 42 is an evaluation seed"
    assert stats["fates"] == {"accepted": 3, "ineligible": 5, "rejected": 1}
    assert stats["kept_effects"]["method"] == {"unmeasured": 3} and stats["unmeasured_kept"] == 3
    assert stats["kept_effects"]["by_unit"]["progression (unmeasured)"]["above_zero"] == 3
    audit = [json.loads(line) for line in (tmp_path / "data" / "decisions.jsonl").read_text().splitlines()]
    assert len(audit) == 9 and all(a["fate"] and a["reason"] for a in audit)
    assert len(stats["dataset_hash"]) == 16
    # The default budget replays every eligible decision, but without the endpoints that played the batch none
    # is: these examples are here only because the settings opt in (keep_unmeasured), and the card says so.
    assert settings().replay.decisions is None and stats["calibration"]["replayed"] == 0
    card = (tmp_path / "data" / "card.md").read_text()
    assert "Not enough replayed decisions to say how far the cheap score can be trusted" in card
    assert "none was replayed" in card
    assert ("3 eligible decisions were left unmeasured (no endpoints were given to replay with): 3 of them are in "
            "the dataset, marked unmeasured (--keep-unmeasured)") in " ".join(card.split())


def test_without_the_opt_in_no_unmeasured_decision_trains(tmp_path):
    """The default: a decision that was not replayed never enters the dataset, and the card counts them."""
    batch = tmp_path / "batch"
    write_episode(batch, 1234)
    with pytest.raises(DatasetTooSmall, match=r"3 eligible decisions were left unmeasured .*--keep-unmeasured"):
        asyncio.run(curate([batch], SCAFFOLD, [42], tmp_path / "data", settings(keep_unmeasured=False)))
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["fates"]["unmeasured"] == 3 and stats["kept_decisions"] == 0 and stats["replay"]["unmeasured"] == 3
    card = " ".join((tmp_path / "data" / "card.md").read_text().split())
    assert "3 eligible decisions were left unmeasured (no endpoints were given to replay with): none of them trains" in card


def test_the_card_states_agreement_only_from_two_replayed_decisions():
    one = {"replayed": 1, "spearman": None, "effect_above_zero": 1, "arms_never_differed": 0, "cheap_accepted": 1,
           "cheap_accepted_effect_above_zero": 1.0}
    assert calibration_words(one).startswith("Not enough replayed decisions") and "only 1 was replayed" in calibration_words(one)
    two = {**one, "replayed": 2, "cheap_accepted": 2, "cheap_accepted_effect_above_zero": 0.5}
    assert calibration_words(two) == ("2 decisions replayed: 1 with an effect above 0, 0 whose arms never differed (effect "
                                      "exactly 0). Spearman rank correlation of cheap score and measured effect: not "
                                      "defined (fewer than 3 decisions, or one side constant); 50% of the 2 replayed "
                                      "decisions the cheap score alone accepts had a measured effect above 0.")


def test_accept_score_zero_takes_no_uncredited_decision(tmp_path):
    write_episode(tmp_path / "batch", 1234)
    result = asyncio.run(curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data",
                                settings(accept_score=0.0, review_floor=-5.0)))
    assert result.stats["fates"] == {"accepted": 3, "ineligible": 5, "rejected": 1}
    assert result.stats["eligible_decisions"] == 3


def test_a_dataset_below_the_minimum_stops_with_a_clear_message(tmp_path):
    write_episode(tmp_path / "batch", 1234)
    with pytest.raises(DatasetTooSmall, match=r"kept 5 examples .* minimum of 300: collect more training rollouts"):
        asyncio.run(curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data", settings(min_examples=300)))
    assert not (tmp_path / "data" / "dataset.parquet").exists()
    assert (tmp_path / "data" / "decisions.jsonl").exists()      # the audit is kept: nothing is lost


def test_only_eval_seed_episodes_is_an_error(tmp_path):
    write_episode(tmp_path / "batch", 42)
    with pytest.raises(CurationError, match="evaluation seed"):
        asyncio.run(curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data", settings()))


def test_duplicates_and_episode_balance(tmp_path):
    batch = tmp_path / "batch"
    for seed in (1001, 1002, 1003):
        write_episode(batch, seed)     # identical episodes: their examples repeat exactly
    asyncio.run(curate([batch], SCAFFOLD, [42], tmp_path / "data", settings()))
    audit = [json.loads(line) for line in (tmp_path / "data" / "decisions.jsonl").read_text().splitlines()]
    fates = [a["fate"] for a in audit if a["score"]["score"] >= 1]
    assert fates.count("accepted") == 3 and fates.count("duplicate") == 6


def test_eta_is_the_mean_pace_times_what_is_left():
    assert eta(0, 4, 3.0) == "?"
    assert eta(1, 4, 20.0) == "1:00" and eta(3, 3, 9.0) == "0:00"
    assert format_duration(3725) == "1:02:05"


def test_a_round_and_its_curate_stage_take_the_same_curation_options():
    """``automem train`` curates as ``automem curate`` does: ``--accept-score`` (0 takes every decision
    that loses no points, what a small model needs) reaches the round's curation settings too."""
    from automem_dagster.cli import build_parser
    from automem_dagster.commands.shared import proficiency_settings

    for command in (["train", "--game", "crafter"], ["curate", "--game", "crafter", "--batch", "b"]):
        args = build_parser().parse_args([*command, "--accept-score", "0", "--min-examples", "170"])
        curation = proficiency_settings(args).curation_settings()
        assert (curation.accept_score, curation.min_examples) == (0.0, 170)
    default = proficiency_settings(build_parser().parse_args(["train", "--game", "crafter"])).curation_settings()
    assert default.accept_score == 1.0 and not default.keep_unmeasured and default.replay.decisions is None
    flags = ["curate", "--game", "crafter", "--batch", "b", "--score-window", "4", "--replay-horizon", "12"]
    opted = proficiency_settings(build_parser().parse_args([*flags, "--keep-unmeasured"])).curation_settings()
    assert opted.keep_unmeasured and (opted.weights.horizon, opted.replay.horizon) == (4, 12)
    assert not proficiency_settings(build_parser().parse_args([*flags, "--keep-unmeasured", "false"])).curation.keep_unmeasured
