"""The meta-LLM's two calls: schemas narrowed to the batch and the parent, replies parsed as untrusted text."""

import asyncio
import json

import pytest
from builders import scripted_client
from meta_call_batches import _batch, _diagnosis

from automem_dagster.meta.diagnose import diagnose
from automem_dagster.meta.diagnosis_record import DiagnosisError
from automem_dagster.meta.revise import propose_revision, revision_messages
from automem_dagster.scaffold import load_scaffold


def _client(server, **overrides):
    return scripted_client(server, base_url="unused", **overrides)


def test_a_diagnosis_that_never_cites_the_batch_fails_and_keeps_the_replies(tmp_path, scripted):
    batch = _batch(tmp_path, 3)
    server = scripted([{"match": "Diagnose this batch", "replies": ["not json", _diagnosis(99)]}])
    with pytest.raises(DiagnosisError, match="no usable diagnosis in 2 attempts") as err:
        asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server), tmp_path / "out", max_attempts=2))
    kept = json.loads((tmp_path / "out" / "diagnosis_failed.json").read_text())
    assert not (tmp_path / "out" / "diagnosis.json").exists()
    assert "not valid JSON" in kept[0]["error"] and "crafter__seed7 has steps 0-2" in kept[1]["error"]
    assert str(tmp_path / "out" / "diagnosis_failed.json") in str(err.value)


def test_a_context_too_small_for_the_batch_is_named(tmp_path, scripted):
    batch = _batch(tmp_path, 3)
    server = scripted([])
    with pytest.raises(DiagnosisError, match="context_tokens 1024 leaves no room"):
        asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server, context_tokens=1024, max_tokens=700),
                             tmp_path / "out"))


def test_a_rejected_patch_is_asked_again_with_its_reason(tmp_path, scripted):
    good = json.dumps({"enable_operations": ["UPSERT"], "rationale": "Finding 1: map lines are rewritten again and again."})
    server = scripted([{"match": "That patch was rejected: wording only", "reply": good},
                       {"match": "Propose one patch", "reply": json.dumps({"rationale": "Reworded the prompts only."})}])
    revision = asyncio.run(propose_revision(load_scaffold("crafter", 0), "## Findings", tmp_path, _client(server), 1))
    assert revision.accepted and revision.version == 1 and len(revision.attempts) == 2
    assert "wording only" in revision.attempts[0].error and revision.attempts[1].error is None
    assert revision.changes == ["operations enabled: ['UPSERT']"]
    out = revision.save(tmp_path / "rev")
    assert "- UPSERT" in (out / "candidate.yaml").read_text()


def test_a_third_attempt_fits_a_context_that_holds_the_request_and_one_rejected_reply(tmp_path, scripted):
    # The embedded meta (4096 tokens) refused a third revision attempt that carried both earlier rejected
    # replies (4281 tokens). Here the context holds the request and one long rejected reply, never two.
    scaffold = load_scaffold("crafter", 0)
    request = "\n".join(m["content"] for m in revision_messages(scaffold, "## Findings"))
    wordy = json.dumps({"rationale": "Reworded the prompts only. " + "The map lines are rewritten. " * 60})
    good = json.dumps({"enable_operations": ["UPSERT"], "rationale": "Finding 1: map lines are rewritten again and again."})
    context = len(request) + len(wordy) + 600
    server = scripted([{"over_chars": context, "status": 400,
                        "error": f"request ({context} tokens) exceeds the available context size ({context} tokens)"},
                       {"match": "Propose one patch", "replies": [wordy, wordy, good]}])
    revision = asyncio.run(propose_revision(scaffold, "## Findings", tmp_path, _client(server), 1))
    assert revision.accepted and [a.error is None for a in revision.attempts] == [False, False, True]


def test_a_prompt_over_the_context_is_compressed_further_and_sent_again(tmp_path, scripted):
    batch = _batch(tmp_path, 40)
    reply = _diagnosis(3)
    # The server refuses any prompt still holding step 30 verbatim, as a server refuses a prompt over its context.
    server = scripted([{"match": "--- step 30", "status": 400,
                        "error": "request (4140 tokens) exceeds the available context size (4096 tokens)"},
                       {"match": "Diagnose this batch", "reply": reply}])
    result = asyncio.run(diagnose(batch, load_scaffold("crafter", 0), _client(server, context_tokens=8192),
                                  tmp_path / "out"))
    assert len(result.attempts) == 1 and result.findings[0]["step"] == 3
    assert any("over the budget" in note for note in result.compression_notes)
