"""The ``summary`` baseline: summarised context, the core move of MemGPT and MemoryBank.

Every ``every`` steps the model rewrites a bounded running summary of the episode from the old
summary and the steps since (one extra call, a ``summary`` turn with its tokens, so it counts in
the per-step cost); each action's prompt is that summary above the ``window`` baseline's window.
The cap is ``summary_tokens``: it is the rewrite's ``max_tokens`` (a server stops there), and its
grammar bounds the text to ``summary_tokens * CHARS_PER_TOKEN`` characters, which the agent also
enforces on what it keeps, so a server that ignores either still cannot grow the summary.
Each step's ``memory_context`` holds the summary the prompt showed and whether it was rewritten
there, which is what a resumed episode restores it from.
"""

from __future__ import annotations

from automem_dagster.agent import prompts
from automem_dagster.agent.baselines import CHARS_PER_TOKEN, DEFAULT_WINDOW, WindowAgent
from automem_dagster.agent.memory_settings import SummarySettings
from automem_dagster.agent.sampling import request_seed
from automem_dagster.agent.step_records import TurnRecord
from automem_dagster.agent.turn_format import ask, summary_turn
from automem_dagster.llm.client import LLMClient


class SummaryAgent(WindowAgent):
    """The window agent with a running summary of the episode, rewritten every ``settings.every`` steps."""

    def __init__(self, family: str, actions: dict[str, str], parse_action, client: LLMClient,
                 window: int = DEFAULT_WINDOW, settings: SummarySettings | None = None, episode_seed: int = 0):
        super().__init__(family, actions, parse_action, client, window, episode_seed)
        self.settings = settings or SummarySettings()
        self.max_chars = self.settings.summary_tokens * CHARS_PER_TOKEN
        self._summary_system = prompts.summary_system_prompt(family, self.max_chars)
        self.summary = ""
        self.since: list[str] = []
        """The steps since the summary was last rewritten, as the rewrite call reads them."""
        self._refreshed: list[int] | None = None
        self._dropped = 0

    def due(self, step: int) -> bool:
        return step > 0 and step % self.settings.every == 0 and bool(self.since)

    async def prepare(self, step: int, observation: str) -> list[TurnRecord]:
        self._refreshed = None
        if not self.due(step):
            return []
        steps = self._fitting_steps()
        messages = [{"role": "system", "content": self._summary_system},
                    {"role": "user", "content": prompts.summary_request(self.summary, steps)}]
        comp = await ask(self.client, messages, summary_turn(self.max_chars), max_tokens=self.settings.summary_tokens,
                         seed=request_seed(self.episode_seed, step, "summary", 0))
        turn = TurnRecord.from_completion("summary", "game", comp)
        text = " ".join(comp.text.split())
        if len(text) > self.max_chars:
            turn.errors.append(f"the summary ran to {len(text)} characters; cut to its cap of {self.max_chars}")
            text = text[:self.max_chars]
        self.summary = text
        self._refreshed = [step - len(self.since), step - 1]
        self.since = []
        return [turn]

    def _fitting_steps(self) -> list[str]:
        """The steps since the last rewrite, the oldest left out while the rewrite would overflow the context."""
        steps = list(self.since)
        budget = (self.client.config.context_tokens - self.settings.summary_tokens) * CHARS_PER_TOKEN
        fixed = len(self._summary_system) + len(self.summary) + 200
        self._dropped = 0
        while len(steps) > 1 and fixed + sum(map(len, steps)) > budget:
            steps.pop(0)
            self._dropped += 1
        return steps

    def memory_text(self) -> str:
        return f"{prompts.SUMMARY_HEADER}\n{self.summary}" if self.summary else ""

    def memory_context(self) -> dict:
        context: dict = {"summary": self.summary, "refreshed": self._refreshed is not None}
        if self._refreshed is not None:
            context["summarised_steps"] = self._refreshed
            if self._dropped:
                context["steps_left_out"] = self._dropped
        return context

    def recall(self, step: int, observation: str, record: dict) -> None:
        super().recall(step, observation, record)
        context = record.get("memory_context")
        if not isinstance(context, dict) or not isinstance(context.get("summary"), str):
            raise ValueError("the step records no memory_context summary to restore the running summary from")
        if context.get("refreshed"):
            self.since = []
        self.summary = context["summary"]

    def record_outcome(self, action: str, reward: float) -> None:
        outcome = f"earned {reward:+g}" if reward else "no reward"
        self.since.append(f"{self._pending}\nAction: {action} ({outcome})")
        super().record_outcome(action, reward)
