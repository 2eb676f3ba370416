"""The tool-using meta-LLM (``meta_mode: tools``) over a real 1,000-step batch.

The batch is played once per module: MiniHack Corridor-R3, seed 7, by the memory agent against
the scripted server (``benchmarks.meta_modes.play``: replies cycle, so memory files change and
the agent oscillates). The meta endpoint is the scripted server answering with ``tool_calls`` the way OpenAI's chat-completions
API does (platform.openai.com/docs/guides/function-calling: ``finish_reason: "tool_calls"``,
``message.tool_calls[].function.arguments`` a JSON string).
"""

import asyncio
import json
import re
import shutil

import pytest
from builders import scripted_client, structure_round
from meta_tool_batches import (
    _tools,
)
from meta_tool_batches import batch as played_batch
from mlflow.tracking import MlflowClient
from structure_round_rules import GAME_RULES, SETTINGS, patch_reply
from tool_calls import _calls, tools_client

from automem_dagster.cli import main as cli_main
from automem_dagster.llm import EndpointConfig, LLMClient
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.session import connect
from automem_dagster.loop.errors import RoundError
from automem_dagster.loop.structure import Storage, revise_stage, start_round
from automem_dagster.meta.compress import ranges
from automem_dagster.meta.diagnose import Diagnosis, DiagnosisError, diagnose
from automem_dagster.meta.evidence import FAILURE_KINDS, collect_evidence
from automem_dagster.meta.revise import propose_revision
from automem_dagster.paths import SCAFFOLDS
from automem_dagster.rollout import episode_id
from automem_dagster.rollout.trajectory import finished_episodes
from automem_dagster.scaffold import load_scaffold
from automem_dagster.tracking import Tracker
from benchmarks.meta_modes import EPISODE, reading_rules

batch = played_batch  # module-scoped: the 1,000-step batch these tests read (meta_tool_batches.py)


def _reply(*steps):
    return json.dumps({"summary": "The agent walks back and forth in the corridor.", "findings": [
        {"episode": EPISODE, "step": step, "kind": "oscillation", "what_happened": "west then east",
         "scaffold_cause": "no oscillation signal", "proposed_change": "enable the oscillation signal"}
        for step in steps]})


def _read(first, last):
    return ("read_steps", {"episode": EPISODE, "first": first, "last": last})


def test_the_meta_reads_steps_900_to_950_cites_them_and_the_diagnosis_passes(batch, scripted, tmp_path):
    rules = reading_rules(batch, 900, 950)
    server = scripted([{"match": "--- step 950", "reply": _reply(930, 948)}, *rules])
    result = asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server), tmp_path / "out"))
    assert [f["step"] for f in result.findings] == [930, 948] and len(result.attempts) == 1
    assert result.meta_mode == "tools" and result.cost["steps_read"] == {EPISODE: "900-950"}
    reads = len(rules)  # one rule per read_steps; the first comes with list_episodes
    assert result.cost["tool_calls"] == reads + 1 and result.cost["requests"] == reads + 1 and result.cost["stops"] == []
    saved = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert reads >= 3 and [c["name"] for c in saved["tool_calls"]] == ["list_episodes"] + ["read_steps"] * reads
    assert all(c["result_chars"] > 0 for c in saved["tool_calls"]) and saved["tool_calls"][1]["cut"]
    assert f"- `{EPISODE}` steps 900-950" in (tmp_path / "out" / "diagnosis.md").read_text()
    requests = [json.loads(line)["body"] for line in server.request_log.read_text().splitlines()]
    assert all(r["tool_choice"] == "auto" and len(r["tools"]) == 6 for r in requests)
    answered = requests[1]["messages"]
    assert answered[2]["tool_calls"][1]["function"] == {"name": "read_steps", "arguments": json.dumps(
        {"episode": EPISODE, "first": 900, "last": 950})}
    assert answered[4]["role"] == "tool" and answered[4]["content"].startswith("--- step 900")


def test_a_finding_citing_an_unread_step_is_rejected_and_asked_again(batch, scripted, tmp_path):
    server = scripted([{"match": "That reply was rejected", "reply": _reply(905)},
                       {"match": "--- step 905", "reply": _reply(905, 500)},
                       {"match": "Diagnose this batch", "reply": _calls(_read(900, 950))}])
    result = asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server), tmp_path / "out"))
    first, second = result.attempts
    assert f"{EPISODE} step 500 was never read or shown to you (you read: 900-9" in first.error
    assert second.error is None and [f["step"] for f in result.findings] == [905]


def test_one_call_a_finding_citing_a_step_summarised_away_is_rejected_and_asked_again(batch, scripted, tmp_path):
    """The one-call mode's 8k context shows a few of the 1,000 steps verbatim; a finding citing one of the
    others is refused with that reason, as in the tool-using mode, and the model is asked again."""
    scaffold = load_scaffold("minihack", 0)
    evidence = collect_evidence(finished_episodes(batch), [f.name for f in scaffold.files])
    first = next(p for kind in FAILURE_KINDS for p in evidence.failure_points if p.kind == kind)  # the first excerpt kept
    server = scripted([{"match": "That reply was rejected", "reply": _reply(first.step_start)},
                       {"match": "Diagnose this batch", "reply": _reply(500)}])
    client = scripted_client(server, base_url="unused")
    result = asyncio.run(diagnose(batch, scaffold, client, tmp_path / "out"))
    prompt = json.loads(server.request_log.read_text().splitlines()[0])["body"]["messages"][1]["content"]
    verbatim = {int(n) for n in re.findall(r"^--- step (\d+)$", prompt, re.M)}
    ends = {int(n) for n in re.findall(r"^!! \S+ steps? \d+(?:-(\d+))?:", prompt, re.M) if n}
    assert 500 not in verbatim | ends and first.step_start in verbatim and len(verbatim) < 100
    rejected, accepted = result.attempts
    assert f"{EPISODE} step 500 was summarised away or omitted (shown verbatim: {ranges(verbatim | ends)})" in rejected.error
    assert accepted.error is None and [f["step"] for f in result.findings] == [first.step_start]
    assert result.cost["steps_shown"] == {EPISODE: ranges(verbatim | ends)}
    assert f"- `{EPISODE}` steps {ranges(verbatim | ends)}" in (tmp_path / "out" / "diagnosis.md").read_text()


def test_the_tool_call_budget_stops_tool_use_and_asks_for_the_diagnosis(batch, scripted, tmp_path):
    server = scripted([{"match": "Tool use is over", "reply": _reply(905)},
                       {"match": "Diagnose this batch", "reply": _calls(_read(900, 910), _read(911, 920),
                                                                        _read(921, 930))}])
    result = asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server, meta_tool_calls=2),
                                  tmp_path / "out"))
    assert [c["ran"] for c in result.tool_calls] == [True, True, False] and result.cost["stops"] == ["calls"]
    assert result.cost["steps_read"] == {EPISODE: "900-920"}
    last = json.loads(server.request_log.read_text().splitlines()[-1])["body"]
    assert last["tool_choice"] == "none" and last["messages"][-2]["content"].startswith("not run: the budget of 2")


def test_the_token_budget_stops_the_diagnosis_with_its_calls_kept(batch, scripted, tmp_path):
    server = scripted([{"match": "Tool use is over", "reply": "not json"},
                       {"match": "Diagnose this batch", "reply": _calls(_read(900, 950))}])
    spent = r"spent \d+ tokens of its meta_token_budget 1000 in 2 request\(s\) and 1 tool call\(s\)"
    with pytest.raises(DiagnosisError, match=spent):
        asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server, meta_token_budget=1000),
                             tmp_path / "out"))
    kept = json.loads((tmp_path / "out" / "diagnosis_failed.json").read_text())
    assert kept["cost"]["stops"] == ["tokens"] and kept["tool_calls"][0]["name"] == "read_steps"
    assert "not valid JSON" in kept["attempts"][0]["error"]


def test_a_vllm_without_a_tool_parser_gets_pointed_to_the_one_call_mode(batch, scripted, tmp_path):
    """vLLM refuses ``tool_choice: "auto"`` unless it was started with --enable-auto-tool-choice and
    --tool-call-parser (vllm/entrypoints/openai/serving_chat.py, ``create_chat_completion``)."""
    server = scripted([], provider={"refuse_auto_tools": True})
    with pytest.raises(DiagnosisError, match="cannot call tools") as err:
        asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server), tmp_path / "out"))
    assert '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser' in str(err.value)
    assert "meta_mode: one_call" in str(err.value)


def test_the_scripted_server_answers_tool_calls_as_openai_documents(scripted):
    server = scripted([{"match": "hi", "reply": _calls(("list_episodes", {}))}])
    completion = asyncio.run(tools_client(server).complete([{"role": "user", "content": "hi"}],
                                                      tools=[{"type": "function", "function": {"name": "list_episodes"}}]))
    assert completion.finish_reason == "tool_calls" and completion.text == ""
    assert completion.tool_calls == ({"id": "call_1_0", "name": "list_episodes", "arguments": "{}"},)


ONSET_PATCH = json.dumps({"patch": {"signals": {"oscillation": {"enabled": True, "window": 6}},
                                     "rationale": "Finding 1: west then east at 930; warn on oscillation."}})


def test_the_revision_reads_the_batch_through_tools_and_its_patch_is_checked_as_before(batch, scripted, tmp_path):
    """The revision in the tool-using mode: it reads a memory file at a cited step, a wording-only patch is
    still rejected by ``apply_patch`` and asked again, and the tool calls and cost go to ``revision.json``."""
    memory = ("read_memory", {"episode": EPISODE, "file": "actions_log.txt", "step": 930})
    server = scripted([{"match": "That patch was rejected: wording only", "reply": ONSET_PATCH},
                       {"match": f"actions_log.txt after step 930 of {EPISODE}",
                        "reply": json.dumps({"patch": {"rationale": "Reworded the prompts only."}})},
                       {"match": "Propose one patch", "reply": _calls(memory, _read(928, 931))}])
    scaffold = load_scaffold("minihack", 0)
    revision = asyncio.run(propose_revision(scaffold, f"## Findings\n- `{EPISODE}` step 930: west then east",
                                            tmp_path, tools_client(server), 1, tools=_tools(batch)))
    assert revision.accepted and revision.changes[0].startswith("signals: oscillation"), revision.changes
    assert "wording only" in revision.attempts[0].error and len(revision.attempts) == 2
    assert revision.meta_mode == "tools" and [c["name"] for c in revision.tool_calls] == ["read_memory", "read_steps"]
    assert revision.cost["steps_read"] == {EPISODE: "928-931"} and revision.cost["tool_calls"] == 2
    saved = json.loads((revision.save(tmp_path / "rev") / "revision.json").read_text())
    assert saved["tool_calls"][0]["steps_shown"] == {EPISODE: "930"} and saved["cost"]["requests"] == 3
    first = json.loads(server.request_log.read_text().splitlines()[0])["body"]
    assert "response_format" not in first and len(first["tools"]) == 6 and "read-only tools" in first["messages"][0]["content"]


def test_a_revision_that_spends_its_token_budget_is_rejected_with_that_reason(batch, scripted, tmp_path):
    server = scripted([{"match": "Tool use is over", "reply": "not a patch"},
                       {"match": "Propose one patch", "reply": _calls(_read(900, 950))}])
    revision = asyncio.run(propose_revision(load_scaffold("minihack", 0), "## Findings", tmp_path,
                                            tools_client(server, meta_token_budget=1000), 1, tools=_tools(batch)))
    assert not revision.accepted and revision.cost["stops"] == ["tokens"]
    assert revision.rejected_reason.startswith("the patch spent ") and "of its meta_token_budget 1000" in revision.rejected_reason
    assert revision.diff_md.startswith("No candidate: the patch spent") and revision.tool_calls[0]["name"] == "read_steps"


def test_a_tool_using_revision_whose_batch_is_gone_says_so(tmp_path, scripted):
    storage = Storage(runs=tmp_path / "runs", scaffolds=tmp_path / "scaffolds", lineage=tmp_path / "lineage")
    shutil.copytree(SCAFFOLDS, storage.scaffolds)
    meta = scripted([])
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=meta.base_url, constrained="none"),
                             meta=EndpointConfig(name="meta", base_url=meta.base_url, constrained="none", meta_mode="tools"))
    diagnosis = Diagnosis("minihack", 0, str(tmp_path / "gone"), "A summary.", [], [], {}, [])

    async def go():
        async with connect(config, tmp_path / "logs") as clients:
            await revise_stage(diagnosis, tmp_path / "diag", load_scaffold("minihack", 0), clients, storage,
                               out=tmp_path / "revision")

    with pytest.raises(RoundError, match="has no finished trajectories, and the tool-using revision reads it"):
        asyncio.run(go())
    assert not (tmp_path / "revision").exists() and not meta.request_log.exists()  # nothing asked


def test_the_endpoints_check_probes_tool_calling_on_a_meta_endpoint_in_tools_mode(tmp_path, capsys, scripted):
    game = scripted([{"match": "", "reply": "<|ACTION|>north<|END|>"}])
    calling = scripted([{"match": "", "reply": _calls(("list_episodes", {}))}])
    no_parser = scripted([], provider={"refuse_auto_tools": True})
    path = tmp_path / "endpoints.yaml"
    for server, verdict in ((calling, "ok"), (no_parser, "UNUSABLE")):
        path.write_text(f"game: {{name: game, base_url: '{game.base_url}', constrained: none}}\n"
                        f"meta: {{name: meta, base_url: '{server.base_url}', constrained: none, meta_mode: tools}}\n")
        code = cli_main(["endpoints", "check", "--endpoints", str(path)])
        meta = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("meta"))
        assert verdict in meta and code == (0 if verdict == "ok" else 1), meta
    assert "--enable-auto-tool-choice" in meta and "meta_mode: one_call" in meta


def test_a_server_that_ignores_tool_choice_none_is_stopped(batch, scripted, tmp_path):
    server = scripted([{"match": "", "reply": _calls(("list_episodes", {}))}])
    with pytest.raises(DiagnosisError, match="kept calling tools after tool use was over"):
        asyncio.run(diagnose(batch, load_scaffold("minihack", 0), tools_client(server, meta_tool_calls=1), tmp_path / "out"))
    kept = json.loads((tmp_path / "out" / "diagnosis_failed.json").read_text())
    assert [c["ran"] for c in kept["tool_calls"]] == [True] + [False] * 8


def test_a_round_with_a_tool_using_meta_keeps_the_patch_gate_and_records_the_mode(tmp_path, scripted):
    """The rest of the round is unchanged: the diagnosis read through tools feeds the schema-checked
    revision, the lineage and the gate, and MLflow's candidate run records the mode and its cost."""
    storage = Storage(runs=tmp_path / "runs", scaffolds=tmp_path / "scaffolds", lineage=tmp_path / "lineage")
    shutil.copytree(SCAFFOLDS, storage.scaffolds)
    episode = episode_id("crafter", start_round(SETTINGS, storage).seeds[0])
    game = scripted(GAME_RULES)
    reply = json.dumps({"summary": "The agent idles on every step it was seen.", "findings": [
        {"episode": episode, "step": 1, "kind": "stuck", "what_happened": "noop again",
         "scaffold_cause": "the plan prompt does not push for interaction", "proposed_change": "warn when stuck"}]})
    meta = scripted([{"match": "step(s) match 'noop'", "reply": patch_reply("WIN-MARKER")},
                     {"match": "Propose one patch", "reply": _calls(("search_steps", {"pattern": "noop"}))},
                     {"match": "--- step 2\n", "reply": reply},
                     {"match": "Diagnose this batch", "reply": _calls(("read_steps", {"episode": episode, "first": 0,
                                                                                       "last": 2}))}])
    config = EndpointsConfig(game=EndpointConfig(name="game", base_url=game.base_url, constrained="none"),
                             meta=EndpointConfig(name="meta", base_url=meta.base_url, constrained="none", meta_mode="tools"))

    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    result, report = structure_round(storage, config, SETTINGS, tracker)
    assert result.outcome == "kept" and storage.load_lineage("crafter").champion().version == 1
    assert (result.diagnosis_dir / "diagnosis.md").read_text().count(f"`{episode}` steps 0-2") == 1
    run = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(report.runs["candidate"].run_id)
    assert run.data.params["meta_mode"] == "tools" and run.data.metrics["diagnosis_tool_calls"] == 1
    assert run.data.metrics["diagnosis_steps_read"] == 3 and run.data.metrics["diagnosis_tokens"] > 0
    revision = json.loads((result.revision_dir / "revision.json").read_text())
    assert revision["meta_mode"] == "tools" and [c["name"] for c in revision["tool_calls"]] == ["search_steps"]
    assert run.data.metrics["revision_tool_calls"] == 1 and run.data.metrics["revision_tokens"] == (
        revision["cost"]["input_tokens"] + revision["cost"]["output_tokens"]) > 0


def test_a_vllm_keeping_its_tools_under_tool_choice_none_is_told_the_flag(batch, scripted, tmp_path):
    """Without --exclude-tools-when-tool-choice-none vLLM keeps the tools in the prompt once tool use is
    over, and a model that calls one anyway answers with the call's markup as text (scripted_tools)."""
    rules = [{"match": "", "reply": _calls(_read(900, 910))}, {"match": "", "reply": _reply(905)}]
    for flag in (False, True):
        server = scripted(rules, {"tool_calling": "vllm", "exclude_tools_when_tool_choice_none": flag})
        vllm = LLMClient(EndpointConfig(name="meta", base_url="unused", server="vllm", constrained="none",
                                        meta_mode="tools", meta_tool_calls=1), server.base_url)
        run = diagnose(batch, load_scaffold("minihack", 0), vllm, tmp_path / f"out{flag}")
        if flag:
            assert asyncio.run(run).findings[0]["step"] == 905
            continue
        with pytest.raises(DiagnosisError, match="restart vLLM with that flag") as err:
            asyncio.run(run)
        assert "--exclude-tools-when-tool-choice-none" in str(err.value)
        kept = json.loads((tmp_path / "outFalse" / "diagnosis_failed.json").read_text())
        assert kept["attempts"][0]["reply"].startswith("<tool_call>")
