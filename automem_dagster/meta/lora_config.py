"""The meta-LLM chooses the specialist's LoRA configuration from the dataset's statistics.

The reply is requested under a JSON schema carrying ``LoraSettings``' bounds, and validated
against them again (an unconstrained endpoint gets no schema): a value out of range is
answered with the reason and asked again. When no attempt is usable the AutoMem paper's scaled
defaults are used and the record says so, with every reply kept, so a training never waits
on a meta-LLM that cannot produce a valid configuration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from automem_dagster.atomic import write_json_atomic
from automem_dagster.datafiles import parse_json_reply, validation_problems
from automem_dagster.llm.client import LLMClient
from automem_dagster.llm.strict_schema import to_strict
from automem_dagster.meta.replies import Attempt, ask_again, describe_reply
from automem_dagster.options import BUDGET
from automem_dagster.training.settings import TARGET_MODULES, LoraSettings

LORA_CONFIG_FILE = "lora_config.json"
"""The LoRA settings chosen for a curated dataset, kept in its folder beside ``dataset.parquet``."""

MAX_ATTEMPTS = BUDGET.max_attempts

SYSTEM_PROMPT = """You are the meta-LLM of AutoMem. You configure the LoRA fine-tuning of a memory \
specialist: a small model trained on a game agent's own best memory decisions (prompt: the agent's \
memory prompt; completion: its memory operations). Choose rank, alpha, dropout, learning rate, \
epochs, batch size, target modules and max length for the dataset described. Larger datasets bear \
higher rank and fewer epochs; small ones need regularisation (dropout, fewer epochs) to avoid \
memorising. Keep alpha about twice the rank. max_length must hold a whole example. Reply with JSON only."""


class LoraReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reasoning: str = Field(min_length=10, max_length=400)
    settings: LoraSettings


@dataclass
class LoraChoice:
    """The configuration to train with, where it came from, and every meta-LLM reply."""

    settings: LoraSettings
    source: str
    """``meta-LLM`` or ``default`` (no usable reply)."""
    reasoning: str
    defaults: LoraSettings
    attempts: list[Attempt] = field(default_factory=list)

    def save(self, path: Path) -> Path:
        write_json_atomic(path, {"settings": self.settings.model_dump(), "source": self.source,
                                 "reasoning": self.reasoning, "defaults": self.defaults.model_dump(),
                                 "attempts": [asdict(a) for a in self.attempts]})
        return path

    def describe(self) -> str:
        """One line saying which settings the round trains with and where they came from, so a
        console never announces a recommendation that was not asked for."""
        s = self.settings
        where = {"given": "given settings (the meta-LLM is not asked)",
                 "meta-LLM": f"recommended by the meta-LLM within bounds ({self.reasoning})",
                 "default": f"the AutoMem paper's defaults scaled to the base ({self.reasoning})"}.get(self.source, self.source)
        return (f"LoRA configuration: {where}: rank {s.rank}, alpha {s.alpha}, dropout {s.dropout:g}, "
                f"learning rate {s.learning_rate:g}, {s.epochs} epoch(s), batch {s.batch_size}, "
                f"max length {s.max_length}, modules {','.join(s.target_modules)}")

    @classmethod
    def load(cls, path: Path) -> LoraChoice:
        import json

        data = json.loads(Path(path).read_text())
        return cls(LoraSettings(**data["settings"]), data["source"], data["reasoning"], LoraSettings(**data["defaults"]),
                   [Attempt(**a) for a in data["attempts"]])


def reply_schema() -> dict:
    schema = LoraReply.model_json_schema()
    settings = schema["$defs"]["LoraSettings"]["properties"]
    settings["target_modules"]["items"] = {"type": "string", "enum": list(TARGET_MODULES)}
    settings["target_modules"]["maxItems"] = len(TARGET_MODULES)
    return to_strict(schema)


def describe_dataset(stats: dict, base: dict) -> str:
    return (f"Base model: {base['name']} ({base['parameters'] / 1e6:.0f}M parameters, hidden size "
            f"{base['hidden_size']}, {base['layers']} layers, context {base['context']} tokens).\n"
            f"Dataset: {stats['examples']} examples from {stats['kept_decisions']} memory decisions in "
            f"{stats['episodes']} episodes; by phase {stats['examples_by_phase']}; mean prompt "
            f"{stats['mean_prompt_chars']} characters (about {stats['mean_prompt_chars'] // 4} tokens), mean "
            f"completion {stats['mean_completion_chars']} characters.")


async def recommend_lora(stats: dict, base: dict, defaults: LoraSettings, client: LLMClient | None,
                         max_attempts: int = MAX_ATTEMPTS, max_rank: int | None = None) -> LoraChoice:
    """Ask ``client`` for a configuration (``base``: name, parameters, hidden_size, layers, context);
    ``max_rank`` is the serving vLLM's ``--max-lora-rank``, told to the meta-LLM and enforced."""
    if client is None:
        return LoraChoice(defaults, "default", "no meta endpoint configured: the AutoMem paper's defaults scaled to the base",
                          defaults)
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": describe_dataset(stats, base) + "\n\nA sound starting point is "
                 + defaults.model_dump_json() + "." + (f" The serving vLLM accepts rank at most {max_rank}."
                                                       if max_rank else "")
                 + " Reply with your reasoning and the settings.\n" + describe_reply(reply_schema())}]
    attempts: list[Attempt] = []
    while len(attempts) < max_attempts:
        completion = await client.complete(messages, json_schema=reply_schema(), schema_name="lora_settings")
        reply, error = parse_json_reply(completion.text, LoraReply)
        if reply is not None and reply.settings.max_length > base["context"]:
            reply, error = None, f"max_length {reply.settings.max_length} exceeds the base's context of {base['context']}"
        elif reply is not None and max_rank is not None and reply.settings.rank > max_rank:
            reply, error = None, f"rank {reply.settings.rank} exceeds the serving vLLM's --max-lora-rank {max_rank}"
        attempts.append(Attempt.of(completion, error))
        if reply is not None:
            return LoraChoice(reply.settings, "meta-LLM", reply.reasoning, defaults, attempts)
        ask_again(messages, 2, completion.text, f"That reply was rejected: {error}. Reply again within the bounds.")
    return LoraChoice(defaults, "default", f"no usable recommendation in {max_attempts} attempts (last: "
                      f"{attempts[-1].error}); the AutoMem paper's defaults scaled to the base", defaults, attempts)


def validate_settings(data: object) -> LoraSettings:
    """Settings given by a person (a JSON file, a Dagster config): out of bounds is an error naming the field."""
    try:
        return LoraSettings.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"LoRA settings out of bounds: {validation_problems(exc)}") from exc
