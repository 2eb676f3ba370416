"""The tool-using meta-LLM's batch tools over a real 1,000-step batch (``meta_tool_batches.py``), with
the embedded server: the tools read a bounded part of the batch and a memory file is replayed from
the journal."""

import json

import pytest
from meta_tool_batches import (
    _tools,
)
from meta_tool_batches import batch as played_batch

from benchmarks.meta_modes import EPISODE

batch = played_batch  # module-scoped: the 1,000-step batch these tests read (meta_tool_batches.py)


@pytest.mark.server  # the module's batch is played against a scripted server
def test_the_tools_read_a_bounded_part_of_the_batch_and_say_what_they_showed(batch):
    tools = _tools(batch)
    listed = tools.call("list_episodes", {})
    assert f"{EPISODE}: seed 7, 1000 steps (0-999)" in listed.text and "oscillation" in listed.text
    read = tools.call("read_steps", json.dumps({"episode": EPISODE, "first": 900, "last": 950}))
    assert read.cut and len(read.text) <= tools.max_chars
    shown = sorted(read.read[EPISODE])
    assert shown[0] == 900 and shown == list(range(900, shown[-1] + 1)) and shown[-1] < 950
    assert f"call read_steps from step {shown[-1] + 1}" in read.text and "--- step 900\nobservation:" in read.text
    hits = tools.call("search_steps", {"pattern": "bogus", "episode": EPISODE})
    assert hits.text.startswith("399 step(s) match 'bogus'; the first 40 are listed") and hits.cut  # 200 + the notes after
    assert len(hits.shown[EPISODE]) == 40 and not hits.read
    assert "invalid_action" in tools.call("read_evidence", {"kind": "invalid_action"}).text
    assert "has no parent scaffold" in tools.call("read_scaffold", {}).text
    for bad, why in [(("read_steps", {"episode": EPISODE, "first": 990, "last": 1000}), "has steps 0-999"),
                     (("read_steps", "{not json"), "not valid JSON"), (("drop_table", {}), "no tool 'drop_table'"),
                     (("search_steps", {"pattern": "("}), "not a regular expression")]:
        result = tools.call(*bad)
        assert result.error and why in result.text and not result.read and not result.shown
    assert [t["function"]["name"] for t in tools.schemas()] == [
        "list_episodes", "read_steps", "search_steps", "read_memory", "read_evidence", "read_scaffold"]


@pytest.mark.server  # the module's batch is played against a scripted server
def test_a_memory_file_at_a_step_is_replayed_from_the_journal(batch):
    tools = _tools(batch)
    final = batch / "memory" / EPISODE / "files"
    for name in ("actions_log.txt", "strategy.txt", "dungeon_map.txt", "game_rules.txt"):
        result = tools.call("read_memory", {"episode": EPISODE, "file": name, "step": 999})
        assert result.text.split("\n", 1)[1] == (final / name).read_text().rstrip("\n"), name
    early = tools.call("read_memory", {"episode": EPISODE, "file": "actions_log.txt", "step": 20}).text
    assert early.startswith(f"actions_log.txt after step 20 of {EPISODE} (") and early.count("moved west") < 10
    missing = tools.call("read_memory", {"episode": EPISODE, "file": "notes.txt", "step": 5})
    assert missing.error and "no memory file 'notes.txt' at step 5" in missing.text
