"""What the memory agent does not ask the model for, because the harness already knows it.

Calls are the bill (``benchmarks/step_cost.py``; issue 29 compares a step with AutoMem's own
harness on the same settings). Two rules, both decided from what the harness holds and both set
by the scaffold's ``routine`` (``scaffold.model.Routine``), so a structure round can revise them:

- **LOG** runs when the previous step did something a note could record beyond what the
  history line already says: one of the routine's ``log_triggers`` (shipped: a reward, or a
  change of inventory or level). A plain move, a blocked move or a no-op is in the history line
  (and in the stuck warning) already, so under the shipped triggers it is not LOGged on its own;
  but at least every ``log_every`` steps LOG runs anyway, so memory is still written on a long
  walk. The games report no message of their own apart from the observation text, so "a new
  game message" is no trigger.
- **The consultation** (PLAN's reads), with ``reuse_consultation`` on, is not asked for again
  while the memory files are unchanged since the last consultation that read something: the
  same reads would return the same lines, so those lines are shown again and one call only picks
  the action. The step's ``memory_context`` says so (``reused_consultation``: the step it came
  from and its lines) and that call is a turn of phase ``action``, so the curation of memory
  decisions, which reads ``log`` and ``plan`` turns, finds no decision there. A write that
  changes a file, or a synced file the harness rewrote, makes the next step consult again.
"""

from __future__ import annotations

from dataclasses import dataclass

from automem_dagster.memory import MemoryStore, MemoryStoreError
from automem_dagster.scaffold.model import Routine

REUSED_NOTE = "(read at step {step}; the memory files are unchanged since)"
"""The line after a reused consultation's results: the prompt otherwise reads as after a fresh one."""


@dataclass(frozen=True)
class Consultation:
    """The last consultation that read something: at which step, the lines its reads returned,
    and the memory files' contents after that step, which must still hold for it to be reused."""

    step: int
    lines: list[str]
    files: tuple[tuple[str, str], ...]


def log_due(step: int, history: list[tuple[str, float]], fingerprints: list[tuple], last_log_step: int,
            routine: Routine) -> bool:
    """Whether ``step`` runs LOG under ``routine``: never at step 0 (nothing happened yet); after one
    of its ``log_triggers``, which the history line does not show; else once ``log_every`` steps have
    passed since ``last_log_step``. ``fingerprints`` are ``signals.progress_fingerprint`` tuples
    (position, inventory, level); with fewer than two, a change of any of them is unknown, so a
    routine that triggers on one LOGs."""
    if not history:
        return False
    return step - last_log_step >= routine.log_every or any(
        _happened(trigger, history[-1][1], fingerprints) for trigger in routine.log_triggers)


_FINGERPRINT_PART = {"position": 0, "inventory": 1, "level": 2}


def _happened(trigger: str, reward: float, fingerprints: list[tuple]) -> bool:
    """Whether the previous step (its ``reward``, the last two fingerprints) shows ``trigger``."""
    if trigger == "reward":
        return reward != 0
    part = _FINGERPRINT_PART[trigger]
    return len(fingerprints) < 2 or fingerprints[-1][part] != fingerprints[-2][part]


def memory_files(store: MemoryStore) -> tuple[tuple[str, str], ...]:
    """Every memory file's content: while it is the same, a consultation would read the same lines."""
    out = []
    for name in store.files():
        try:
            out.append((name, store.read_text(name)))
        except MemoryStoreError:
            out.append((name, "(unreadable)"))
    return tuple(out)


def result_line(op: str, result: str) -> str:
    """One read as a consultation's results show it, played (``memory_agent``) or replayed from its
    record: one format, so a reused consultation reads exactly as the fresh one did."""
    return f"{op} -> {result}"


def last_consultation(step: int, turns: list[dict], store: MemoryStore) -> Consultation | None:
    """The consultation of a step from its turns as the trajectory records them (``plan`` turns' ops),
    with the files as they are now; None when its plan turns read nothing."""
    lines = [result_line(r["op"], r["result"]) for t in turns if t["phase"] == "plan" for r in t["ops"]]
    return Consultation(step, lines, memory_files(store)) if lines else None


def show_consulted(messages: list[dict], lines: list[str], note: str = "") -> None:
    """Put what a consultation read before the step message (nothing when it read nothing), with
    ``note`` after the results (a reused consultation says from which step)."""
    if lines:
        shown = "\n".join([*lines, note] if note else lines)
        messages[1]["content"] = "Memory consulted:\n" + shown + "\n\n" + messages[1]["content"]
