"""The LOG + PLAN agent against scripted OpenAI-compatible servers and real games.

Scripted replies make every branch reachable on purpose: well-formed turns, reads that
feed results back, malformed output, disabled operations, hostile file names, and the
two-model split between a memory endpoint and a game endpoint; and the request seeds are the same
in every process."""

import asyncio
import json

import pytest
from builders import with_routine
from shipped_routine import LOG_EVERY

from automem_dagster.agent import MemoryAgent
from automem_dagster.games import make_game
from automem_dagster.llm import EndpointConfig, LLMClient
from automem_dagster.memory import FilePolicy, Journal, MemoryStore
from automem_dagster.scaffold import load_scaffold


def _client(server, name="game", constrained="none"):
    return LLMClient(EndpointConfig(name=name, base_url="unused", server="llama.cpp", constrained=constrained), server.base_url)


def play(tmp_path, game_name, scaffold, game_server, steps, memory_server=None, constrained="none"):
    """Play ``steps`` steps and return (agent, outcomes)."""

    async def go():
        game = make_game(game_name, max_steps=steps + 5)
        store = MemoryStore(tmp_path / "ep" / "files", journal=Journal(tmp_path / "ep" / "journal.jsonl"))
        memory = _client(memory_server, "memory") if memory_server else None
        client = _client(game_server, "game", constrained)
        agent = MemoryAgent(scaffold, store, game.actions(), game.parse_action, client, memory)
        result, outcomes = game.reset(7), []
        try:
            for t in range(steps):
                agent.observe_state(result.state)
                outcome = await agent.step(t, result.observation)
                result = game.step(outcome.action)
                agent.record_outcome(outcome.action, result.reward)
                outcomes.append(outcome)
        finally:
            game.close()
            for c in (client, memory):
                if c is not None:
                    await c.close()
        return agent, outcomes

    return asyncio.run(go())


def test_one_model_step_writes_memory_and_acts(tmp_path, scripted):
    """Plain moves trigger no LOG of their own (the history line shows them), but LOG still runs every
    ``log_every`` steps, so an episode of plain moves still writes its memory."""
    server = scripted([
        {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|went west\n<|DONE|>"},
        {"match": "Phase: PLAN", "reply": "<|ACTION|>move_west<|END|>"},
    ])
    steps = LOG_EVERY + 4
    agent, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=steps)
    assert [d.action for d in outcomes] == ["move_west"] * steps and all(d.valid for d in outcomes)
    # Seed 7: the move of step LOG_EVERY + 1 costs 2 health (reward -0.2), so the next step LOGs at once.
    assert [[t.phase for t in d.turns] for d in outcomes] == [
        ["log", "plan"] if t in (LOG_EVERY, LOG_EVERY + 2) else ["plan"] for t in range(steps)]
    assert agent.store.read_text("actions_log.txt").splitlines() == ["went west", "went west"]
    second = outcomes[LOG_EVERY + 2].turns[0].ops[0]
    assert second.ok and second.redundant                              # the same line again is flagged
    assert all(t.input_tokens > 0 and t.latency_s > 0 and not t.errors for d in outcomes for t in d.turns)
    assert (tmp_path / "ep" / "journal.jsonl").read_text().count("went west") == 2


def test_a_routine_with_log_every_1_logs_every_step_and_consults_every_step(tmp_path, scripted):
    """``log_every: 1`` and ``reuse_consultation: false``: a LOG at every step after the first (step 0 has
    no previous step to record) and a fresh consultation at every step, whatever the moves did."""
    server = scripted([
        {"match": "Phase: LOG", "reply": "<|APPEND|>strategy.txt|wood lies west\n<|DONE|>"},
        {"match": "Results:", "reply": "<|ACTION|>move_west<|END|>"},
        {"match": "Phase: PLAN", "reply": "<|READ|>strategy.txt"},
    ])
    scaffold = with_routine("crafter", log_every=1, reuse_consultation=False)
    steps = 4
    _, outcomes = play(tmp_path, "crafter", scaffold, server, steps=steps)
    assert [[t.phase for t in d.turns] for d in outcomes] == [
        ["plan", "plan"], *[["log", "plan", "plan"]] * (steps - 1)]
    assert not any(d.memory_context for d in outcomes)


def test_a_consultation_is_reused_while_memory_is_unchanged_and_redone_after_a_write(tmp_path, scripted):
    """The same reads of unchanged files would return the same lines: they are shown again and one
    call picks the action (phase ``action``), the step says which consultation it reused; the
    LOG write of step ``log_every`` changes a file, so that step consults again."""
    server = scripted([
        {"match": "Phase: LOG", "reply": "<|APPEND|>strategy.txt|wood lies west\n<|DONE|>"},
        {"match": "unchanged since)", "reply": "<|ACTION|>move_west<|END|>"},
        {"match": "Results:", "reply": "<|ACTION|>move_west<|END|>"},
        {"match": "Phase: PLAN", "reply": "<|READ|>strategy.txt"},
    ])
    steps = LOG_EVERY + 2
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=steps, constrained="gbnf")
    phases = [[t.phase for t in d.turns] for d in outcomes]
    assert phases == [["plan", "plan"], *[["action"]] * (LOG_EVERY - 1), ["log", "plan", "plan"], ["action"]]
    assert all(d.valid and d.action == "move_west" and not any(t.errors for t in d.turns) for d in outcomes)
    reused = [d.memory_context.get("reused_consultation") for d in outcomes]
    assert [r and r["step"] for r in reused] == [None, *[0] * (LOG_EVERY - 1), None, LOG_EVERY]
    assert "Collect wood" in reused[1]["results"][0] and "wood lies west" in reused[-1]["results"][0]
    requests = [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]
    assert len(requests) == sum(len(d.turns) for d in outcomes)         # no call for a reused consultation
    shown = requests[2]["messages"][1]["content"]
    assert shown.startswith("Memory consulted:\n<|READ|>strategy.txt -> ")
    assert "\n(read at step 0; the memory files are unchanged since)\n\nStep 1." in shown
    assert "reads ::=" not in requests[2]["grammar"]                    # the reused turn can only act


def test_plan_reads_are_fed_back_before_the_action(tmp_path, scripted):
    server = scripted([
        {"match": "Results:", "reply": "<|ACTION|>do<|END|>"},
        {"match": "Phase: PLAN", "reply": "<|READ|>strategy.txt"},
    ])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=1)
    first, second = outcomes[0].turns
    assert first.ops[0].op == "<|READ|>strategy.txt" and "Collect wood" in first.ops[0].result
    assert second.text == "<|ACTION|>do<|END|>" and outcomes[0].action == "do"


def test_malformed_output_is_recorded_and_falls_back(tmp_path, scripted):
    server = scripted([
        {"match": "Phase: LOG", "reply": "I moved. <|FLY|>sky <|APPEND|>"},
        {"match": "Phase: PLAN", "replies": ["Action: Move North.", "zzz nothing"]},
    ])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=LOG_EVERY + 1)
    assert outcomes[0].action == "move_north" and outcomes[0].valid     # tolerant parse of free text
    assert outcomes[1].action == "noop" and not outcomes[1].valid       # BALROG default + feedback note
    assert "noop" in outcomes[1].note
    log = outcomes[LOG_EVERY].turns[0]
    assert log.phase == "log" and log.errors and not log.ops


def test_disabled_operations_and_hostile_names_are_refused(tmp_path, scripted):
    server = scripted([
        {"match": "Phase: LOG", "reply": "<|UPSERT|>map_notes.txt|1,2|tree\n<|APPEND|>../../escape.txt|x\n"
                                         "<|WRITE|>/tmp/abs.txt|x\n<|DONE|>"},
        {"match": "Phase: PLAN", "reply": "<|APPEND|>strategy.txt|plan phase write\n<|ACTION|>move_west<|END|>"},
    ])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=LOG_EVERY + 1)
    upsert, escape, absolute = outcomes[LOG_EVERY].turns[0].ops
    assert not upsert.ok and "not enabled" in upsert.result
    assert not escape.ok and not absolute.ok
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path.parent / "escape.txt").exists()
    assert sorted(p.name for p in (tmp_path / "ep").iterdir()) == ["files", "journal.jsonl"]


def test_plan_phase_cannot_write(tmp_path, scripted):
    server = scripted([
        {"match": "Results:", "reply": "<|ACTION|>noop<|END|>"},
        {"match": "Phase: PLAN", "reply": "<|APPEND|>strategy.txt|sneaky"},
    ])
    agent, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=1)
    assert not outcomes[0].turns[0].ops[0].ok
    assert "sneaky" not in agent.store.read_text("strategy.txt")


def test_two_model_mode_splits_memory_and_action(tmp_path, scripted):
    memory = scripted([
        {"match": "Phase: LOG", "reply": "<|APPEND|>dungeon_map.txt|corridor east\n<|DONE|>", "times": 1},
        {"match": "Phase: LOG", "reply": "<|DONE|>"},
        {"match": "Results:", "reply": "<|DONE|>"},
        {"match": "Phase: PLAN", "reply": "<|READ|>dungeon_map.txt"},
    ])
    game = scripted([{"match": "Memory consulted", "reply": "<|ACTION|>east<|END|>"},
                     {"match": "", "reply": "<|ACTION|>west<|END|>"}])
    agent, outcomes = play(tmp_path, "minihack:Corridor-R3", load_scaffold("minihack", 0), game, LOG_EVERY + 2, memory)
    logged = next(t for t, d in enumerate(outcomes) if d.turns[0].phase == "log")   # at LOG_EVERY at the latest
    turns = outcomes[logged].turns
    # One consultation turn, then the game model acts: no turn of the memory model only to say DONE.
    assert [(t.phase, t.endpoint) for t in turns] == [("log", "memory"), ("plan", "memory"), ("action", "game")]
    assert outcomes[logged].action == "east"                            # the game model saw the consultation
    assert "corridor east" in agent.store.read_text("dungeon_map.txt")
    # Memory unchanged since (later LOGs wrote nothing): the game model is shown that consultation
    # again, the memory model is not asked to consult.
    assert [(t.phase, t.endpoint) for t in outcomes[-1].turns if t.phase != "log"] == [("action", "game")]
    assert outcomes[-1].memory_context["reused_consultation"]["step"] == logged and outcomes[-1].action == "east"


def test_signals_warn_when_stuck_and_oscillating(tmp_path, scripted):
    scaffold = load_scaffold("minihack", 0)
    scaffold = scaffold.model_copy(update={"signals": scaffold.signals.model_copy(update={
        "stuck": scaffold.signals.stuck.model_copy(update={"enabled": True, "repeats": 3}),
        "oscillation": scaffold.signals.oscillation.model_copy(update={"enabled": True, "reversals": 2}),
    })})
    server = scripted([{"match": "Phase: LOG", "reply": "<|DONE|>"},
                       {"match": "Phase: PLAN", "replies": ["<|ACTION|>east<|END|>", "<|ACTION|>west<|END|>"]}])
    _, outcomes = play(tmp_path, "minihack:Corridor-R3", scaffold, server, steps=6)
    assert any(w.startswith("oscillating") for d in outcomes for w in d.warnings)
    blocked = scripted([{"match": "Phase: LOG", "reply": "<|DONE|>"},
                        {"match": "Phase: PLAN", "reply": "<|ACTION|>search<|END|>"}])
    _, outcomes = play(tmp_path / "b", "minihack:Corridor-R3", scaffold, blocked, steps=4)
    assert not outcomes[1].warnings and outcomes[3].warnings[0].startswith("stuck")


def test_synced_files_follow_game_state(tmp_path, scripted):
    scaffold = load_scaffold("crafter", 0)
    files = [*scaffold.files, scaffold.files[0].model_copy(update={
        "name": "status.txt", "purpose": "position and vitals", "policy": FilePolicy(mode="synced", sync_source="status")})]
    scaffold = scaffold.model_copy(update={"files": files})
    server = scripted([{"match": "Phase: LOG", "reply": "<|WRITE|>status.txt|fake\n<|DONE|>"},
                       {"match": "Phase: PLAN", "reply": "<|ACTION|>move_east<|END|>"}])
    agent, outcomes = play(tmp_path, "crafter", scaffold, server, steps=LOG_EVERY + 1)
    assert not outcomes[LOG_EVERY].turns[0].ops[0].ok                   # the model cannot overwrite it
    assert "health" in agent.store.read_text("status.txt") and "x=" in agent.store.read_text("status.txt")


def test_a_phase_that_outgrows_the_context_drops_its_oldest_read_results(tmp_path, scripted):
    server = scripted([
        # Any request still holding the first read's result is refused as over the context.
        {"match": "Collect wood", "status": 400, "error": "request (4152 tokens) exceeds the available context size"},
        {"match": "Phase: PLAN", "replies": ["<|READ|>strategy.txt", "<|ACTION|>do<|END|>"]},
    ])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=1)
    first, second = outcomes[0].turns
    assert "Collect wood" in first.ops[0].result
    assert outcomes[0].action == "do" and outcomes[0].valid
    assert second.errors == ["the oldest read results of this phase were dropped to fit the endpoint's context"]


# --- sampling seeds ------------------------------------------------------------------------------


@pytest.mark.contract
def test_request_seeds_are_stable_across_processes_and_distinct_per_position():
    """The seed of a request depends on (episode seed, step, phase, turn) only, never on the process."""
    import subprocess
    import sys

    from automem_dagster.agent.sampling import request_seed

    positions = [(42, 0, "plan", 0), (42, 0, "plan", 1), (42, 0, "log", 0), (42, 1, "plan", 0), (43, 0, "plan", 0)]
    here = [request_seed(*p) for p in positions]
    assert len(set(here)) == len(here) and all(0 <= s < 2**31 for s in here)
    code = ("import json; from automem_dagster.agent.sampling import request_seed; "
            f"print(json.dumps([request_seed(*p) for p in {positions!r}]))")
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": hash_seed})
        assert json.loads(out.stdout) == here


def test_an_action_outside_the_vocabulary_in_a_well_formed_token_is_a_malformed_turn(tmp_path, scripted):
    server = scripted([
        {"match": "Phase: LOG", "reply": "<|DONE|>"},
        {"match": "Phase: PLAN", "reply": "<|ACTION|>fly to the moon<|END|>"},
    ])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=1)
    [outcome] = outcomes
    assert outcome.action == "noop" and not outcome.valid
    assert any("fly to the moon" in e and "names no action of this game" in e for e in outcome.turns[-1].errors)


def test_phases_with_nothing_to_do_are_skipped(tmp_path, scripted):
    """LOG is skipped after an action that changed nothing (noop: same position, inventory, level, no
    reward), and PLAN offers no reads while every memory file is empty: each saves a model call."""
    v0 = load_scaffold("crafter", 0)
    empty = v0.model_copy(update={"files": [f.model_copy(update={"initial": ""}) for f in v0.files]})
    server = scripted([{"match": "Phase: LOG", "reply": "<|DONE|>"},
                       {"match": "Phase: PLAN", "reply": "<|ACTION|>noop<|END|>"}])
    _, outcomes = play(tmp_path, "crafter", empty, server, steps=3, constrained="gbnf")
    assert [[t.phase for t in d.turns] for d in outcomes] == [["plan"], ["plan"], ["plan"]]
    grammars = [json.loads(line)["body"].get("grammar", "") for line in server.request_log.read_text().splitlines()]
    assert len(grammars) == 3 and all("root ::=" in g and "reads ::=" not in g for g in grammars)


def test_a_consultation_reads_several_files_in_one_turn_and_never_twice(tmp_path, scripted):
    server = scripted([{"match": "Results:", "reply": "<|ACTION|>do<|END|>"},
                       {"match": "Phase: PLAN", "reply": "<|READ|>strategy.txt\n<|READ|>strategy.txt\n<|TAIL|>x.txt|2"}])
    _, outcomes = play(tmp_path, "crafter", load_scaffold("crafter", 0), server, steps=1)
    consult, act = outcomes[0].turns
    assert [op.op for op in consult.ops] == ["<|READ|>strategy.txt", "<|TAIL|>x.txt|2"]
    assert consult.ops[0].ok and not consult.ops[1].ok
    assert act.text == "<|ACTION|>do<|END|>" and outcomes[0].action == "do"
