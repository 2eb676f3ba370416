"""What the baseline agents' tests share: the scripted game endpoint, playing a batch with a baseline, and a
client that records its requests (tests/unit/agent/test_baselines.py, tests/contract/test_baseline_rollouts.py,
tests/e2e/test_baselines_embedded.py)."""

import asyncio

from automem_dagster.games.actions import ActionVocabulary
from automem_dagster.llm import EndpointConfig
from automem_dagster.llm.client import Completion, LLMClient
from automem_dagster.llm.session import Clients
from automem_dagster.rollout import RolloutSpec, read_trajectory, run_batch
from automem_dagster.scaffold import load_scaffold

CRAFTER = {"noop": "nothing", "move_north": "go north", "do": "interact"}


def endpoint(base_url: str, **extra) -> EndpointConfig:
    return EndpointConfig(name="game", base_url=base_url, model="scripted", constrained="none", max_retries=0,
                          timeout_s=5, **extra)


def clients_for(server) -> Clients:
    return Clients(LLMClient(endpoint(server.base_url), server.base_url), None, None)


def play(game: str, out, clients: Clients, agent: str, seeds=(42,), steps=6, window=8):
    spec = RolloutSpec(game, load_scaffold(game.split(":")[0], 0), list(seeds), steps, out, concurrency=1, agent=agent,
                       window=window)

    async def go():
        try:
            return await run_batch(spec, clients)
        finally:
            if clients.game is not None:
                await clients.game.close()

    return asyncio.run(go())


def steps_of(out) -> dict[int, list[dict]]:
    result = {}
    for path in sorted((out / "trajectories").glob("*.jsonl")):
        header, steps, _ = read_trajectory(path)
        result[header["seed"]] = steps
    return result


class Recording:
    """A client that records every request and answers with one fixed reply."""

    def __init__(self, reply: str, **config):
        self.config = endpoint("http://127.0.0.1:9/v1", **config)
        self.reply = reply
        self.requests: list[tuple[list[dict], str | None]] = []
        self.seeds: list[int | None] = []

    async def complete(self, messages, grammar=None, json_schema=None, max_tokens=None, seed=None) -> Completion:
        self.requests.append((messages, grammar, max_tokens))
        self.seeds.append(seed)
        return Completion(self.reply, 100, 5, 0.01, 1, "stop")


def drive(agent, observations: list[str]) -> list:
    async def go():
        outcomes = []
        for step, obs in enumerate(observations):
            outcome = await agent.step(step, obs)
            agent.record_outcome(outcome.action, 1.0 if step == 1 else 0.0)
            outcomes.append(outcome)
        return outcomes

    return asyncio.run(go())


def parsed(text: str):
    """``text`` parsed as an action of ``CRAFTER`` (the agents' parser)."""
    return ActionVocabulary(CRAFTER, "noop").parse(text)
