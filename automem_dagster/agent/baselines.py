"""Baseline agents without memory: the yardsticks a memory scaffold has to beat.

* ``random``: a uniformly random valid action each step, seeded by the episode seed; no model.
* ``window``: BALROG's naive agent. The last N steps (observation and action) are in context and
  one model call per step answers with the action.
* ``cot``: the same window, but the model first writes one bounded line of reasoning, then the
  action.
* ``rag`` and ``summary`` (``rag_agent.py``, ``summary_agent.py``): the same window plus a memory
  that goes beyond it, retrieved records of earlier steps or a running summary; these are the
  memory designs people use already, the comparison a file memory has to win.
* ``oracle`` (``oracle_agent.py``): the same window with the needed facts of a memory game always
  in memory, the ceiling of memory's headroom.

They play through the same runner as the memory agent and record the same step records (turns
with tokens and latency, the action, its validity and note), so trajectories, summaries,
behaviour metrics and evidence are computed by the same code. The model's action is read and
defaulted exactly as in the memory agent (``resolve_action``).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from automem_dagster.agent import prompts
from automem_dagster.agent.sampling import request_seed
from automem_dagster.agent.step_records import StepOutcome, TurnRecord, resolve_action
from automem_dagster.agent.turn_format import TurnConstraint, action_turn, ask, reasoning_turn
from automem_dagster.games.base import GameState
from automem_dagster.llm.client import LLMClient
from automem_dagster.memory import parse_ops

BASELINES = ("random", "window", "cot", "rag", "summary", "oracle")
AGENTS = ("memory", *BASELINES)
WINDOWED = ("window", "cot", "rag", "summary", "oracle")
"""The agents whose history length (``window``) is a setting."""

DEFAULT_WINDOW = 8
REASONING_MAX_CHARS = 300
"""The bound on a chain-of-thought line: about 75-100 tokens of real text, at most 300 (one per
ASCII character), which is why a chain-of-thought call asks for more than the default ``max_tokens``."""

JSON_OVERHEAD_TOKENS = 24
"""What ``{"thought": "", "action": ""}`` costs beyond its values, with room for a few spaces."""

CHARS_PER_TOKEN = 3
"""A cautious estimate for fitting the window into the endpoint's context (real text runs nearer 4)."""


class Agent(Protocol):
    """What the rollout runner drives: ``observe_state`` then ``step`` before each game step,
    ``record_outcome`` after it. A resumed episode replays its recorded steps with ``recall``
    in place of ``step``: the agent keeps what ``step`` would have kept, without a model call,
    from the step's trajectory ``record`` (where its ``memory_context`` says what it held)."""

    def observe_state(self, state: GameState) -> None: ...

    async def step(self, step: int, observation: str) -> StepOutcome: ...

    def recall(self, step: int, observation: str, record: dict) -> None: ...

    def record_outcome(self, action: str, reward: float) -> None: ...


class RandomAgent:
    """A uniformly random valid action; the same seed gives the same actions. Never calls a model."""

    def __init__(self, actions: dict[str, str], seed: int):
        self.actions = list(actions)
        self.rng = random.Random(seed)

    def observe_state(self, state: GameState) -> None:
        pass

    async def step(self, step: int, observation: str) -> StepOutcome:
        return StepOutcome(self.rng.choice(self.actions), True, "", [], [])

    def recall(self, step: int, observation: str, record: dict) -> None:
        self.rng.choice(self.actions)  # the draw ``step`` made, so the following ones stay the same

    def record_outcome(self, action: str, reward: float) -> None:
        pass


@dataclass(frozen=True)
class _Past:
    message: str
    action: str


class WindowAgent:
    """The last ``window`` steps as chat turns (the step's observation, then the action taken),
    the current observation, and one constrained call for the action.

    Past turns show the action only, so a chain of thought never piles up in the context. When
    the prompt would not fit the endpoint's context the oldest steps are left out. Each request's
    sampling seed comes from ``episode_seed`` and the step, so a rerun draws the same replies.
    """

    phase = "action"

    def __init__(self, family: str, actions: dict[str, str], parse_action, client: LLMClient,
                 window: int = DEFAULT_WINDOW, episode_seed: int = 0):
        if window < 0:
            raise ValueError(f"window {window}: the history length must be 0 or more steps")
        self.actions = list(actions)
        self.parse_action = parse_action
        self.client = client
        self.episode_seed = episode_seed
        self.window = window
        self.history: deque[_Past] = deque(maxlen=window or None)
        self._system = self.system_prompt(family, actions)
        self._pending = ""
        self._last_reward = 0.0
        self._reply_chars = max(map(len, self.actions)) + len("<|ACTION|><|END|>")

    def system_prompt(self, family: str, actions: dict[str, str]) -> str:
        return prompts.baseline_system_prompt(family, actions)

    def constraint(self) -> TurnConstraint:
        return action_turn(self.actions)

    def instruction(self) -> str:
        return prompts.BASELINE_ACTION

    def max_tokens(self) -> int:
        """Output tokens to ask for: the endpoint's own setting covers an action line."""
        return self.client.config.max_tokens

    def observe_state(self, state: GameState) -> None:
        pass

    def char_budget(self) -> int:
        """The characters a request may hold: the endpoint's context less the reply, at ``CHARS_PER_TOKEN``."""
        return (self.client.config.context_tokens - self.max_tokens()) * CHARS_PER_TOKEN

    def memory_text(self) -> str:
        """What a memory baseline adds before the current step (retrieved records, a summary); none here."""
        return ""

    async def prepare(self, step: int, observation: str) -> list[TurnRecord]:
        """The calls a memory baseline makes before the action (an embedding, a summary); none here."""
        return []

    def memory_context(self) -> dict:
        """What the memory put in this step's prompt, for the trajectory (and a resume's ``recall``)."""
        return {}

    def messages(self, step: int, observation: str) -> list[dict]:
        """The request for ``step``: system prompt, the window as user/assistant turns, the current step."""
        current = prompts.baseline_step_message(step, observation, self._last_reward)
        self._pending = current
        memory = self.memory_text()
        shown = f"{memory}\n\n{current}" if memory else current
        past = list(self.history) if self.window else []
        budget = self.char_budget()
        fixed = len(self._system) + len(shown) + len(self.instruction())
        while past and fixed + sum(len(p.message) + self._reply_chars for p in past) > budget:
            past.pop(0)
        messages = [{"role": "system", "content": self._system}]
        for p in past:
            messages += [{"role": "user", "content": p.message},
                         {"role": "assistant", "content": f"<|ACTION|>{p.action}<|END|>"}]
        messages.append({"role": "user", "content": f"{shown}\n\n{self.instruction()}"})
        return messages

    def recall(self, step: int, observation: str, record: dict) -> None:
        self._pending = prompts.baseline_step_message(step, observation, self._last_reward)

    async def step(self, step: int, observation: str) -> StepOutcome:
        before = await self.prepare(step, observation)
        comp = await ask(self.client, self.messages(step, observation), self.constraint(), max_tokens=self.max_tokens(),
                         seed=request_seed(self.episode_seed, step, self.phase, 0))
        turn = TurnRecord.from_completion(self.phase, "game", comp)
        turn.errors += parse_ops(comp.text).errors
        parsed = resolve_action(turn, self.parse_action)
        return StepOutcome(parsed.action, parsed.valid, parsed.note, [*before, turn], [],
                           memory_context=self.memory_context())

    def record_outcome(self, action: str, reward: float) -> None:
        if self.window:
            self.history.append(_Past(self._pending, action))
        self._last_reward = reward


class ChainOfThoughtAgent(WindowAgent):
    """The window agent, answering with one line of reasoning (at most ``reasoning_chars``) before the action."""

    phase = "cot"

    def __init__(self, family: str, actions: dict[str, str], parse_action, client: LLMClient,
                 window: int = DEFAULT_WINDOW, reasoning_chars: int = REASONING_MAX_CHARS, episode_seed: int = 0):
        self.reasoning_chars = reasoning_chars
        super().__init__(family, actions, parse_action, client, window, episode_seed)

    def system_prompt(self, family: str, actions: dict[str, str]) -> str:
        return prompts.baseline_system_prompt(family, actions, self.reasoning_chars)

    def constraint(self) -> TurnConstraint:
        return reasoning_turn(self.actions, self.reasoning_chars)

    def instruction(self) -> str:
        return prompts.BASELINE_COT

    def max_tokens(self) -> int:
        """Enough for the longest reply the grammar allows (reasoning line, newline, action line;
        one token per character at most), so a long thought is never cut off before its action;
        a JSON reply (``constrained: json_schema``) also spends tokens on its keys and quotes."""
        json_keys = JSON_OVERHEAD_TOKENS if self.client.config.constrained == "json_schema" else 0
        return max(self.client.config.max_tokens, self.reasoning_chars + 1 + self._reply_chars + json_keys)
