"""PNG plots of scaffold evaluations, for MLflow artifacts and Dagster metadata.

Figures are built on ``matplotlib.figure.Figure`` directly: no pyplot, so no backend and no
global figure registry, which keeps plotting safe in Dagster worker processes without a
display. Files are written to a temporary name and renamed, so a reader never sees half a PNG.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from pathlib import Path

from automem_dagster.atomic import write_bytes_atomic


def _figure(**kwargs):
    """A ``matplotlib.figure.Figure``; matplotlib is imported here, on the first plot, so that the
    commands which draw nothing (a rollout) do not load it."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)

DECISION_COLOURS = {
    "baseline": "#7f7f7f",
    "kept": "#2ca02c",
    "rolled_back": "#d62728",
    "inconclusive": "#bcbd22",
    "rejected": "#ff7f0e",
    "pending": "#1f77b4",
    "champion": "#9467bd",
    "specialist": "#17becf",
}

COST_METRICS = (
    ("model_calls_per_step", "model calls", 1.0),
    ("input_tokens_per_step", "k input tokens", 1000.0),
    ("output_tokens_per_step", "output tokens", 1.0),
    ("wall_s_per_step", "wall seconds", 1.0),
)
"""Per-step cost panel: metric key, axis label, divisor (input tokens are thousands, the rest are small)."""


@dataclass(frozen=True)
class VersionPoint:
    """One scaffold version's mean progression (percent) and its standard error."""

    version: int
    mean: float
    se: float
    decision: str

    def __post_init__(self) -> None:
        if self.decision not in DECISION_COLOURS:
            raise ValueError(f"decision {self.decision!r} of v{self.version}: expected one of {tuple(DECISION_COLOURS)}")


def plot_progression_by_version(points: list[VersionPoint], title: str, out: Path) -> Path:
    """Progression by version with ± SE bars, coloured by decision, the champion's level drawn across."""
    if not points:
        raise ValueError(f"points is empty: nothing to plot for {title!r}; pass at least one evaluated version")
    points = sorted(points, key=lambda p: p.version)
    fig = _figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([p.version for p in points], [p.mean for p in points], color="#bbbbbb", zorder=1)
    for decision, colour in DECISION_COLOURS.items():
        chosen = [p for p in points if p.decision == decision]
        if chosen:
            ax.errorbar(
                [p.version for p in chosen], [p.mean for p in chosen], yerr=[p.se for p in chosen],
                fmt="o", color=colour, capsize=4, markersize=8, label=decision.replace("_", " "), zorder=2,
            )
    for champion in (p for p in points if p.decision == "champion"):
        ax.axhline(champion.mean, color=DECISION_COLOURS["champion"], linestyle="--", linewidth=1.5, zorder=0)
        ax.annotate(f"champion v{champion.version}", (points[0].version, champion.mean), xytext=(8, -12),
                    textcoords="offset points", color=DECISION_COLOURS["champion"], fontsize=8)
    for p in points:  # the figures themselves, so a zero SE (every seed alike) reads as such, not as a missing bar
        ax.annotate(f"{p.mean:.1f} ± {p.se:.1f}", (p.version, p.mean + p.se), xytext=(0, 6),
                    textcoords="offset points", ha="center", fontsize=8)
    ax.set_xticks([p.version for p in points], [f"v{p.version}" for p in points])
    top = max(max(p.mean + p.se for p in points) * 1.25, 1.0)
    ax.set_ylim(bottom=-0.06 * top, top=top)  # below 0, so markers at 0 % are drawn whole, not cut by the axis
    ax.margins(x=0.1)
    ax.set_xlabel("scaffold version")
    ax.set_ylabel("progression (%)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, out)


def plot_behaviour(
    candidate: dict[str, float],
    champion: dict[str, float],
    title: str,
    out: Path,
    candidate_label: str = "candidate",
    champion_label: str = "champion",
) -> Path:
    """Candidate beside champion: memory and action rates in one panel, per-step cost in the other."""
    for name, metrics in ((candidate_label, candidate), (champion_label, champion)):
        if not metrics:
            raise ValueError(f"behaviour metrics of {name!r} are empty: pass BehaviourMetrics.as_dict()")
    rates = sorted(k for k in candidate.keys() & champion.keys() if k.endswith("_rate"))
    costs = [(key, label, scale) for key, label, scale in COST_METRICS if key in candidate and key in champion]
    if not rates and not costs:
        raise ValueError(f"{candidate_label!r} and {champion_label!r} share no rate or per-step cost metric to plot")
    fig = _figure(figsize=(10, 0.45 * max(len(rates), len(costs)) + 2), layout="constrained")
    fig.suptitle(title)
    rate_ax, cost_ax = fig.subplots(1, 2)
    _grouped_bars(rate_ax, [k.removesuffix("_rate").replace("_", " ") for k in rates],
                  [candidate[k] for k in rates], [champion[k] for k in rates], candidate_label, champion_label)
    rate_ax.set_xlabel("rate")
    rate_ax.set_title("rates (lower is better)")
    _grouped_bars(cost_ax, [label for _, label, _ in costs], [candidate[k] / s for k, _, s in costs],
                  [champion[k] / s for k, _, s in costs], candidate_label, champion_label)
    cost_ax.set_xlabel("per step")
    cost_ax.set_title("cost per step")
    return save_figure(fig, out)


@dataclass(frozen=True)
class AgentPoint:
    """One agent's mean progression (percent) ± SE on a seed set: a baseline, a scaffold version,
    or a scaffold with its memory specialist. ``kind`` picks the colour (a DECISION_COLOURS key).
    ``costs`` holds its per-step cost (``model_calls_per_step``, ``input_tokens_per_step``,
    ``output_tokens_per_step``) where the run logged it."""

    label: str
    mean: float
    se: float
    kind: str
    costs: dict[str, float] = field(default_factory=dict)
    identity: str | None = None
    """The digest of the batch behind the point (``rollout.identity``); None for runs from before identities."""

    @property
    def tokens_per_step(self) -> float | None:
        if "input_tokens_per_step" not in self.costs:
            return None
        return self.costs["input_tokens_per_step"] + self.costs.get("output_tokens_per_step", 0.0)


def plot_agent_comparison(points: list[AgentPoint], title: str, out: Path) -> Path:
    """Progression by agent with ± SE bars, in the order given (floor first, best agent last), and
    beside it what each costs per step (model calls, tokens) where the runs logged it."""
    if not points:
        raise ValueError(f"points is empty: nothing to plot for {title!r}; pass at least one evaluated agent")
    costed = any(p.costs for p in points)
    width = max(5.0, 1.3 * len(points) + 2)
    fig = _figure(figsize=(width * (2.2 if costed else 1.0), 4), layout="constrained")
    fig.suptitle(title)
    axes = fig.subplots(1, 3) if costed else [fig.add_subplot()]
    xs = list(range(len(points)))
    colours = [DECISION_COLOURS.get(p.kind, "#1f77b4") for p in points]
    ax = axes[0]
    ax.bar(xs, [p.mean for p in points], yerr=[p.se for p in points], capsize=5, color=colours)
    for x, p in zip(xs, points, strict=True):
        ax.annotate(f"{p.mean:.1f}", (x, p.mean + p.se), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    ax.set_ylim(bottom=0, top=max(max(p.mean + p.se for p in points) * 1.2, 1.0))
    ax.set_ylabel("progression (%)")
    panels = [(ax, "progression")]
    if costed:
        for ax, label, values in ((axes[1], "model calls per step", [p.costs.get("model_calls_per_step") for p in points]),
                                  (axes[2], "tokens per step (input + output)", [p.tokens_per_step for p in points])):
            ax.bar(xs, [v or 0.0 for v in values], color=colours)
            for x, v in zip(xs, values, strict=True):
                ax.annotate("n/a" if v is None else f"{v:.3g}", (x, v or 0.0), xytext=(0, 3),
                            textcoords="offset points", ha="center", fontsize=8)
            ax.set_ylabel(label)
            panels.append((ax, label))
    for ax, _ in panels:
        ax.set_xticks(xs, [p.label for p in points], fontsize=8, rotation=30 if len(points) > 5 else 0)
        ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, out)


def plot_learning_curve(curve, out: Path) -> Path:
    """Progression by round (``loop.curve.LearningCurve``): each round's challenger (circle: a scaffold
    candidate, square: a specialist; coloured by decision) and champion (± SE bars, paired seeds), and
    a step line for the agent in service after each round, so a kept gain reads as a step up."""
    rounds = curve.rounds
    if not rounds:
        raise ValueError(f"the learning curve of {curve.family} has no round on one budget: nothing to plot")
    fig = _figure(figsize=(max(6.0, 0.9 * len(rounds) + 3), 4), layout="constrained")
    ax = fig.add_subplot()
    xs = [r.index for r in rounds]
    ax.step([0] + xs, [rounds[0].champion_mean] + [r.in_service for r in rounds], where="post",
            color=DECISION_COLOURS["champion"], linewidth=1.5, label="agent in service")
    ax.errorbar([x - 0.08 for x in xs], [r.champion_mean for r in rounds], yerr=[r.champion_se for r in rounds],
                fmt="_", color=DECISION_COLOURS["champion"], capsize=3, markersize=10, label="champion")
    for r in rounds:
        ax.errorbar([r.index + 0.08], [r.challenger_mean], yerr=[r.challenger_se], capsize=3, markersize=8,
                    fmt="o" if r.loop == "structure" else "s", color=DECISION_COLOURS.get(r.decision, "#1f77b4"))
        ax.annotate(f"{r.challenger}\n{r.decision.replace('_', ' ')}", (r.index + 0.08, r.challenger_mean + r.challenger_se),
                    xytext=(0, 4), textcoords="offset points", ha="center", fontsize=7)
    ax.set_xticks(xs, [f"{r.index}\n{r.loop}" for r in rounds], fontsize=8)
    ax.set_xlim(-0.3, len(rounds) + 0.6)
    top = max(max(max(r.challenger_mean + r.challenger_se, r.champion_mean + r.champion_se) for r in rounds) * 1.3, 1.0)
    ax.set_ylim(bottom=-0.04 * top, top=top)
    ax.set_xlabel("round (circle: scaffold candidate, square: specialist)")
    ax.set_ylabel("progression (%)")
    ax.set_title(f"{curve.family}: {curve.seed_count} paired seeds x {curve.max_steps} steps")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, out)


def plot_losses(train: list[list[float]], validation: list[list[float]], title: str, out: Path) -> Path:
    """Training and validation loss by optimizer step (``[step, loss]`` pairs)."""
    if not validation:
        raise ValueError(f"no validation loss to plot for {title!r}: the training run recorded none")
    fig = _figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], color="#1f77b4", alpha=0.7, label="training loss")
    ax.plot([s for s, _ in validation], [v for _, v in validation], "o-", color="#d62728", label="validation loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (completion tokens)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out)


EFFECT_COLOURS = {"replayed": "#2ca02c", "unmeasured": "#7f7f7f"}
"""How a kept decision's effect was measured (``meta/calibration.effect_of``)."""


def plot_effects(values: list[list], title: str, out: Path) -> Path:
    """The kept decisions' effects as histograms, one panel per unit, replayed and unmeasured effects stacked
    in their own colours. ``values`` are ``[effect, unit, method]`` (curation's ``kept_effect_values``)."""
    if not values:
        raise ValueError(f"no kept decisions to plot for {title!r}")
    units = sorted({unit for _, unit, _ in values})
    fig = _figure(figsize=(4.5 * len(units), 3.6), layout="constrained")
    fig.suptitle(title)
    for ax, unit in zip(fig.subplots(1, len(units), squeeze=False)[0], units, strict=True):
        groups = {m: [v for v, u, method in values if u == unit and method == m] for m in EFFECT_COLOURS}
        shown = {m: g for m, g in groups.items() if g}
        every = [v for g in shown.values() for v in g]
        span = (min(0.0, *every), max(0.0, *every))
        pad = (span[1] - span[0]) * 0.05 or 1.0
        ax.hist(list(shown.values()), bins=20, range=(span[0] - pad, span[1] + pad), stacked=True,
                color=[EFFECT_COLOURS[m] for m in shown], label=[f"{m} ({len(g)})" for m, g in shown.items()])
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"effect ({'progression points' if unit == 'progression' else 'reward'})")
        ax.set_ylabel("kept decisions")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, out)


def plot_paper_table(rows: list[dict], title: str, out: Path, first_label: str, final_label: str) -> Path:
    """In the manner of the AutoMem paper's Figure 4: a panel per metric, the first scaffold's and the
    final champion's means side by side, the relative change and its p-value above, the paper's
    range below. ``rows`` are ``loop.paper_table.TableRow`` as dicts."""
    if not rows:
        raise ValueError(f"no table rows to plot for {title!r}")
    fig = _figure(figsize=(3.0 * len(rows), 3.6), layout="constrained")
    fig.suptitle(title)
    for ax, row in zip(fig.subplots(1, len(rows), squeeze=False)[0], rows, strict=True):
        ax.bar([0, 1], [row["first"], row["final"]], color=["#7f7f7f", "#9467bd"])
        ax.set_xticks([0, 1], [first_label, final_label])
        better = "higher" if row["metric"] == "progression" else "lower"
        ax.set_title(f"{row['metric'].replace('_', ' ')}\n({better} is better)", fontsize=9)
        if row["relative_change"] is not None:
            relative = f"{row['relative_change']:+.0f}%"
        else:
            relative = "from 0" if row["final"] else "0 on both"
        ax.annotate(f"{relative}, p {row['p_value']:.3f}", (0.5, 0.97), xycoords="axes fraction", ha="center",
                    va="top", fontsize=8)
        ax.set_xlabel(f"paper: {row['paper']}", fontsize=8)
        ax.set_ylim(bottom=0, top=max(row["first"], row["final"]) * 1.25 or 1.0)
        ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, out)


def _grouped_bars(ax, labels: list[str], first: list[float], second: list[float], first_label: str, second_label: str) -> None:
    rows = range(len(labels))
    height = 0.38
    ax.barh([r - height / 2 for r in rows], first, height, label=first_label, color="#1f77b4")
    ax.barh([r + height / 2 for r in rows], second, height, label=second_label, color="#9467bd")
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8)


def save_figure(fig, out: Path) -> Path:
    """Write ``fig`` as a PNG atomically (a reader never sees half a file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return write_bytes_atomic(Path(out), buffer.getvalue())


def png_markdown(path: Path, alt: str) -> str:
    """A markdown image carrying the PNG inline, so Dagster's UI shows it without a file server."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"![{alt}](data:image/png;base64,{data})"


def plot_round_plans(plans, out: Path) -> Path:
    """One round's data flow per loop, drawn from its plan (``loop/round_plan.py``): a box per step, its
    Dagster asset above the stage function it runs and the DVC stages that run it, an arrow from each step
    it reads. Drawn by matplotlib
    (no graphviz on a plain install), one row per loop, so the picture is the plan and cannot drift."""
    fig = _figure(figsize=(2.3 * max(len(p.steps) for p in plans), 1.3 * len(plans)))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.5, max(len(p.steps) for p in plans) - 0.5)
    ax.set_ylim(-len(plans) + 0.4, 0.6)
    ax.axis("off")
    for row, plan in enumerate(plans):
        at = {step.name: (col, -row) for col, step in enumerate(plan.steps)}
        ax.text(-0.48, -row + 0.42, f"{plan.loop} round", fontsize=9, fontweight="bold", va="bottom")
        for step in plan.steps:
            x, y = at[step.name]
            decides = step.name == plan.decision
            stages = "\n".join(f"dvc: {stage}" for stage in step.dvc) or "(no DVC stage)"
            ax.text(x, y, f"{step.name}\n{step.stage.__name__}()\n{stages}",
                    ha="center", va="center", fontsize=8, bbox={"boxstyle": "round,pad=0.4", "linewidth": 1,
                    "facecolor": DECISION_COLOURS["champion" if decides else "pending"] + "33"})
            for read in step.reads:
                ax.annotate("", xy=(x - 0.36, y), xytext=(at[read][0] + 0.36, at[read][1]),
                            arrowprops={"arrowstyle": "->", "color": "#444444"})
    return save_figure(fig, out)
