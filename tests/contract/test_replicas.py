"""An endpoint role over several replicas: spread, sticky per episode, and a dead replica costs nothing."""

import asyncio
import json

from automem_dagster.endpoint_checks import check_endpoints
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.config import EndpointsConfig
from automem_dagster.llm.process import free_port
from automem_dagster.llm.replicas import ReplicatedClient, episode_affinity
from automem_dagster.llm.session import connect
from automem_dagster.rollout import RolloutSpec, read_trajectory, run_batch
from automem_dagster.scaffold import load_scaffold

RULES = [
    {"match": "Phase: LOG", "reply": "<|APPEND|>actions_log.txt|moved\n<|DONE|>"},
    {"match": "Step 3. Your previous action", "reply": "<|ACTION|>north<|END|>"},
    {"match": "Phase: PLAN", "reply": "<|ACTION|>east<|END|>"},
    {"match": "Reply with any valid answer", "reply": "<|ACTION|>north<|END|>"},
]
SEEDS = [21, 22, 23, 24, 25, 26]


def _config(*servers, **extra) -> EndpointConfig:
    urls = [s if isinstance(s, str) else s.base_url for s in servers]
    return EndpointConfig(name="game", base_url=urls[0], replicas=urls[1:], model="scripted", constrained="none",
                          max_retries=0, **extra)


def _requests(server) -> list[dict]:
    """What the server received so far (its log appears with the first request)."""
    if not server.request_log.exists():
        return []
    return [json.loads(line) for line in server.request_log.read_text().splitlines()]


def test_episodes_spread_over_replicas_and_keep_to_theirs(scripted):
    first, second = scripted(RULES), scripted(RULES)
    client = ReplicatedClient(_config(first, second))
    ask = [{"role": "user", "content": "Phase: PLAN"}]

    async def go():
        for turn in range(3):
            for episode in ("a", "b", "c", "d"):
                with episode_affinity(episode, []):
                    await client.complete([{**ask[0], "content": f"{ask[0]['content']} {episode} {turn}"}])
        status = client.status()
        await client.close()
        return status

    status = asyncio.run(go())
    # Episodes a and c went to the first replica, b and d to the second, and stayed there every turn.
    seen = {server: sorted({r["body"]["messages"][0]["content"].split()[2] for r in _requests(server)})
            for server in (first, second)}
    assert seen == {first: ["a", "c"], second: ["b", "d"]}
    assert [s["episodes"] for s in status] == [2, 2] and all(s["up"] for s in status)


def _play(config, out, meanwhile=None):
    """Play the batch; ``meanwhile`` (a coroutine function) runs beside it, e.g. to stop a replica."""
    async def go():
        async with connect(EndpointsConfig(game=config), out.parent / "logs") as clients:
            spec = RolloutSpec(game="minihack:Corridor-R3", scaffold=load_scaffold("minihack", 0), seeds=SEEDS,
                               max_steps=8, out_dir=out, concurrency=3)
            beside = asyncio.create_task(meanwhile()) if meanwhile else None
            summary = await run_batch(spec, clients)
            if beside:
                await beside
            return summary, clients.game.status() if isinstance(clients.game, ReplicatedClient) else None

    return asyncio.run(go())


def _steps(out):
    return {p.name: [(s["observation"], s["action"]) for s in read_trajectory(p)[1]]
            for p in sorted((out / "trajectories").glob("*.jsonl"))}


def test_a_replica_that_dies_mid_batch_loses_no_episode(tmp_path, scripted):
    alone, first, second = scripted(RULES), scripted(RULES), scripted(RULES)

    _play(_config(alone), tmp_path / "clean")

    async def stop_second_midway():
        while len(_requests(second)) < 10:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(second.stop)

    summary, status = _play(_config(first, second), tmp_path / "replicated", stop_second_midway)
    assert sorted(e.seed for e in summary.episodes) == SEEDS
    # Every episode finished with exactly the steps of a run on one healthy server: nothing lost, nothing twice.
    assert _steps(tmp_path / "replicated") == _steps(tmp_path / "clean")
    assert status[1]["failures"] >= 1 and not status[1]["up"]
    # The attempts lost on the dead replica show as retries of the calls that moved (the summary's retries).
    assert sum(summary.retries.by_cause.values()) >= 1, summary.retries
    assert len(_requests(second)) >= 10 and len(_requests(first)) > 0


def test_endpoints_check_probes_each_replica(tmp_path, scripted):
    live = scripted(RULES)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    rows = asyncio.run(check_endpoints(EndpointsConfig(game=_config(live, dead)), tmp_path))
    assert [(r.base_url, r.ok, r.reachable) for r in rows] == [(live.base_url, True, True), (dead, False, False)]
