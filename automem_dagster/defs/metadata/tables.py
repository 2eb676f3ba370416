"""Tables, code blocks and one-line identities: the text pieces every asset's metadata is built from.

They format figures the stages computed (``BatchSummary``'s progression, behaviour and retries); nothing is
computed here, so both loops' pages and the CLI's reports show a batch the same way."""

from __future__ import annotations

from automem_dagster.llm.attempts import describe_failures
from automem_dagster.loop.gate import identity_quote
from automem_dagster.rollout import BatchSummary


def code_block(text: str, language: str = "") -> str:
    return f"```{language}\n{text.rstrip()}\n```"


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def behaviour_table(columns: dict[str, dict[str, float]]) -> str:
    """One row per behaviour metric, one column per batch (``{"candidate v1": metrics, ...}``)."""
    names = list(columns)
    keys = list(next(iter(columns.values())))
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {k} | " + " | ".join(_cell(columns[n].get(k, "")) for n in names) + " |" for k in keys]
    return "\n".join(lines)


def progression_table(batches: dict[str, BatchSummary]) -> str:
    """Mean ± SE (percent, BALROG's convention: ``4.5 ± 0.0``) and the per-seed progressions of each batch."""
    lines = ["| scaffold | progression % | n | per seed % |", "|---|---:|---:|---|"]
    for name, b in batches.items():
        seeds = ", ".join(f"{e.seed}: {100 * e.progression:.1f}" for e in sorted(b.episodes, key=lambda e: e.seed))
        lines.append(f"| {name} | {b.progression.mean:.1f} ± {b.progression.stderr:.1f} | {b.progression.n} | {seeds} |")
    return "\n".join(lines)


def retries_table(batches: dict[str, BatchSummary]) -> str:
    """Per batch: calls, attempts, retries by cause, time lost to them and model latency, so a faulty
    endpoint shows as retries rather than as a slow model."""
    lines = ["| batch | calls | attempts | retries by cause | time lost to retries s | model latency s |",
             "|---|---:|---:|---|---:|---:|"]
    for name, b in batches.items():
        r = b.retries
        if r is not None:
            causes = describe_failures(r.by_cause) or "none"
            lines.append(f"| {name} | {r.calls} | {r.attempts} | {causes} | {r.retry_s:.2f} | {r.model_s:.2f} |")
    return "\n".join(lines)


def identity_text(summary: BatchSummary) -> str:
    """A batch's identity as one line: its digest and the models that played (``gate.identity_quote``)."""
    quote = identity_quote(summary)
    models = ", ".join(f"{role}={model}" for role, model in quote["models"].items())
    return f"{quote['digest']} ({models})" if quote["digest"] else "unknown (played before batches recorded identities)"
