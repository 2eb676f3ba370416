"""Curation's meta review of borderline decisions against the scripted server, on constructed
trajectories (``curation_episodes.py``): kept or dropped, an unusable reply, the calls it counts."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from builders import scripted_client
from curation_episodes import SCAFFOLD, settings, write_episode

from automem_dagster.meta.curate import DatasetTooSmall, curate


def test_meta_review_keeps_or_drops_borderline_decisions(tmp_path, scripted):
    reply = json.dumps({"judgements": [{"id": 0, "keep": True, "reason": "records where the agent acted"},
                                     {"id": 1, "keep": False, "reason": "did nothing"}]})
    server = scripted([{"match": "review its memory decisions", "reply": reply}])
    batch = tmp_path / "batch"
    write_episode(batch, 1234)

    async def run():
        client = scripted_client(server)
        try:
            return await curate([batch], SCAFFOLD, [42], tmp_path / "data", settings(accept_score=10), meta=client)
        finally:
            await client.close()

    result = asyncio.run(run())
    assert result.stats["fates"] == {"reviewed_kept": 1, "reviewed_dropped": 2, "ineligible": 5, "rejected": 1}
    review = json.loads((tmp_path / "data" / "review.json").read_text())
    assert len(review) == 1 and review[0]["error"] is None
    lines = (tmp_path / "data" / "decisions.jsonl").read_text().splitlines()
    audit = {json.loads(line)["id"]: json.loads(line) for line in lines}
    assert audit["crafter__seed1234/step0/plan"]["reason"] == "records where the agent acted"    # best borderline first
    assert audit["crafter__seed1234/step2/log"]["fate"] == "ineligible"      # uncredited: never reviewed


def test_an_unusable_review_reply_drops_the_batch_and_is_kept(tmp_path, scripted):
    server = scripted([{"match": "review its memory decisions", "reply": "I think they are fine"}])
    write_episode(tmp_path / "batch", 1234)

    async def run():
        client = scripted_client(server)
        try:
            return await curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data", settings(accept_score=10),
                                meta=client)
        finally:
            await client.close()

    with pytest.raises(DatasetTooSmall, match="kept 0 examples"):     # every borderline decision dropped
        asyncio.run(run())
    assert json.loads((tmp_path / "data" / "stats.json").read_text())["fates"]["reviewed_dropped"] == 3
    review = json.loads((tmp_path / "data" / "review.json").read_text())
    assert review[0]["reply"] == "I think they are fine" and review[0]["error"].startswith("review reply unusable")


def test_the_review_counts_its_calls_with_an_eta(tmp_path, scripted):
    reply = json.dumps({"judgements": [{"id": 0, "keep": True, "reason": "records where the agent acted"}]})
    server = scripted([{"match": "review its memory decisions", "reply": reply}])
    write_episode(tmp_path / "batch", 1234)
    lines: list[str] = []

    async def run():
        client = scripted_client(server)
        try:
            await curate([tmp_path / "batch"], SCAFFOLD, [42], tmp_path / "data", settings(review_batch=1, accept_score=10),
                         meta=client,
                         progress=lines.append)
        finally:
            await client.close()

    asyncio.run(run())
    reviews = [line for line in lines if line.startswith("meta-LLM review")]
    assert [r.split(" (")[0] for r in reviews] == ["meta-LLM review 1/3", "meta-LLM review 2/3", "meta-LLM review 3/3"]
    assert reviews[0].endswith("eta ?") and all(re.search(r"eta \d+:\d\d$", r) for r in reviews[1:])
