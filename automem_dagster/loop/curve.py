"""The learning curve of a game family: every decided round of both loops, in the order they ran.

Each round logs its challenger (a scaffold candidate or a LoRA specialist) to MLflow with the verdict,
and names the run of the champion batch it was played beside (tag ``automem.champion_run``, set by
``tracking/batches.log_champion_once``: a champion batch reused by later rounds is logged once). The
curve reads those runs back (``Tracker.runs_for``), so it shows what the rounds measured and decided,
never a figure computed again: round by round, the challenger's and
the champion's progression on the same paired seeds, and the agent in service after the round (the
challenger where it was kept, the champion otherwise). Only rounds evaluated on one seed set and
step budget are comparable; the curve takes the budget of the latest decided round and says how many
rounds it left out.
"""

from __future__ import annotations

from dataclasses import dataclass

CHALLENGERS = ("candidate", "specialist")


@dataclass(frozen=True)
class CurveRound:
    """One decided round: its loop, challenger and champion labels, their progression (percent) ± SE."""

    index: int
    loop: str
    """``structure`` (a scaffold candidate) or ``proficiency`` (a specialist)."""
    challenger: str
    champion: str
    challenger_mean: float
    challenger_se: float
    champion_mean: float
    champion_se: float
    decision: str

    @property
    def kept(self) -> bool:
        return self.decision == "kept"

    @property
    def in_service(self) -> float:
        """The progression of the agent in service after this round."""
        return self.challenger_mean if self.kept else self.champion_mean


@dataclass(frozen=True)
class LearningCurve:
    family: str
    seeds: str
    max_steps: int
    rounds: list[CurveRound]
    left_out: int
    """Decided rounds on another seed set or step budget, or whose champion run is not in the store."""

    def markdown(self) -> str:
        lines = [f"Learning curve of {self.family}: {len(self.rounds)} decided rounds on the same "
                 f"{self.seed_count} evaluation seeds x {self.max_steps} steps"
                 + (f" ({self.left_out} left out: another budget, or no champion run)" if self.left_out else ""), "",
                 "| round | loop | challenger | challenger (%) | champion | champion (%) | decision | in service (%) |",
                 "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r.index} | {r.loop} | {r.challenger} | {r.challenger_mean:.1f} ± {r.challenger_se:.1f} | "
                  f"{r.champion} | {r.champion_mean:.1f} ± {r.champion_se:.1f} | {r.decision} | {r.in_service:.1f} |"
                  for r in self.rounds]
        return "\n".join(lines)

    def metrics(self) -> dict[str, float]:
        """Per round ``round<i>_challenger``, ``round<i>_champion`` and ``round<i>_in_service`` (percent)."""
        values: dict[str, float] = {}
        for r in self.rounds:
            values |= {f"round{r.index}_challenger": r.challenger_mean, f"round{r.index}_champion": r.champion_mean,
                       f"round{r.index}_in_service": r.in_service}
        return values

    @property
    def seed_count(self) -> int:
        return len(self.seeds.split(",")) if self.seeds else 0


class NoRoundsError(ValueError):
    """No decided round of the family is in MLflow: nothing to draw."""


def learning_curve(family: str, rows: list[dict]) -> LearningCurve:
    """The decided rounds among ``rows`` (``Tracker.runs_for``, newest first) on the latest round's budget."""
    oldest_first = list(reversed(rows))
    challengers = [r for r in oldest_first if r["role"] in CHALLENGERS and r["decision"] and r["progression_mean"] is not None]
    if not challengers:
        raise NoRoundsError(f"no decided round of {family!r} is logged to MLflow: run a round first "
                            f"(automem rounds / automem train) with tracking on")
    budget = _budget(challengers[-1])
    by_id = {r["run_id"]: r for r in oldest_first}
    rounds: list[CurveRound] = []
    left_out = 0
    for run in challengers:
        champion = by_id.get(run["champion_run"])
        if champion is None or {_budget(run), _budget(champion)} != {budget}:
            left_out += 1
            continue
        rounds.append(CurveRound(
            index=len(rounds) + 1, loop="structure" if run["role"] == "candidate" else "proficiency",
            challenger=_label(run), champion=_label(champion),
            challenger_mean=run["progression_mean"], challenger_se=run["progression_se"] or 0.0,
            champion_mean=champion["progression_mean"], champion_se=champion["progression_se"] or 0.0,
            decision=run["decision"]))
    return LearningCurve(family, budget[0] or "", budget[1], rounds, left_out)


def _budget(run: dict) -> tuple[str | None, int | None]:
    return run["seeds"], run["max_steps"]


def _label(run: dict) -> str:
    return f"v{run['version']}" + (f" + {run['adapter']}" if run.get("adapter") else "")
