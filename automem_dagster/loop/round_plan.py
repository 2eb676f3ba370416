"""Each loop's round, written once: its steps in order, what each reads and writes, the stage function it
runs, and where each runs.

A round is the same steps whoever runs it, and the plan is executable: Dagster's assets are built from
it (``defs/plans/assets.py``: one asset per step, named after it, reading exactly the steps it
``reads``, described by what it ``makes`` and the stage it runs; a step that ``plays`` a batch of
episodes becomes a graph of seed shards), the round jobs select ``round_steps`` and the promotion jobs
``decision``, and the CLI runs the whole plan as one Dagster run (``defs/cli_rounds.py``). DVC runs each
step as the stages ``dvc`` names (``dvc.yaml``, generated from the plans by ``automem dvc-yaml``). The
rules inside the steps are written once too, in the stage functions every executor calls: how a round
starts (``structure.start_round``, ``proficiency.start_proficiency_round``: resume an undecided
challenger, else play the champion on ``seed_blocks.round_seeds``), the gate (``loop.gate`` under the
round's ``GatePolicy``) and what a decision does (``challenger.judge_challenger``).
``tests/unit/loop/test_round_plan.py`` checks the Dagster asset graph and ``dvc.yaml`` against these plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from automem_dagster.loop import challenger, evaluation, proficiency, structure


@dataclass(frozen=True)
class Step:
    """One step of a round: ``name`` (its Dagster asset), the steps whose results it ``reads``, what it
    ``makes``, the ``stage`` function of the core it runs, where its result is ``written``, and the DVC
    stages that run it (none where DVC has no such step). ``plays``: the step plays a batch of episodes
    (Dagster splits it into seed shards, one step each). ``after``: assets of another loop it reads no
    value from but is stale without (the proficiency round's rollouts after a new champion scaffold)."""

    name: str
    reads: tuple[str, ...]
    makes: str
    stage: Callable
    writes: str
    dvc: tuple[str, ...] = ()
    plays: bool = False
    after: tuple[str, ...] = ()

    @property
    def stage_name(self) -> str:
        """The stage function as ``module.function``, below the package (``loop.structure.diagnose_stage``)."""
        return f"{self.stage.__module__.removeprefix('automem_dagster.')}.{self.stage.__qualname__}"


@dataclass(frozen=True)
class RoundPlan:
    """A loop's round: ``steps`` in order, the last of which takes the decision; ``outcomes`` says what
    each way a round can end means."""

    loop: str
    steps: tuple[Step, ...]
    outcomes: dict[str, str]

    @property
    def round_steps(self) -> tuple[str, ...]:
        """Every step up to the challenger's evaluation: what Dagster's round job runs."""
        return tuple(step.name for step in self.steps[:-1])

    @property
    def decision(self) -> str:
        """The step that decides: the one place the champion pointer moves."""
        return self.steps[-1].name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps)

    def step(self, name: str) -> Step:
        return self.steps[self.names.index(name)]


STRUCTURE_ROUND = RoundPlan("structure", (
    Step("rollout_batch", (), "the champion scaffold played on a fresh block of training seeds; nothing while a "
                              "candidate of an earlier round waits for its decision (it is resumed)",
         stage=structure.start_round, writes="runs/rollouts/<game>/v<N>/<batch>/", dvc=("rollout",), plays=True),
    Step("diagnosis", ("rollout_batch",), "the meta's findings on those trajectories, each citing a step",
         stage=structure.diagnose_stage, writes="runs/diagnoses/<game>/v<N>/<batch>/", dvc=("diagnose",)),
    Step("scaffold_candidate", ("diagnosis",), "a revision of the champion: the next scaffold version, pending in "
                                               "the lineage, or the reason there is none",
         stage=structure.revise_stage, writes="runs/revisions/<game>/v<N>/<batch>/, assets/scaffolds/<family>/v<N+1>"
                                              ".yaml and the lineage (pending)", dvc=("revise",)),
    Step("candidate_evaluation", ("scaffold_candidate",), "candidate and champion on the same fixed evaluation seeds",
         stage=evaluation.evaluation_spec, writes="runs/evaluations/<game>/v<N>/<batch>/ (each side)",
         dvc=("evaluate_candidate",), plays=True),
    Step("champion_scaffold", ("candidate_evaluation",), "the gate's decision, recorded; the candidate becomes the "
                                                         "champion on a keep",
         stage=challenger.judge_challenger, writes="runs/decisions/<game>/v<N>.json and the lineage's champion",
         dvc=("decide",)),
), {
    "kept": "the gate judged the candidate better on the paired seeds: it is the champion now",
    "rolled_back": "the evidence rules out a gain worth having, or shows a loss: the champion stays",
    "inconclusive": "the evidence cannot tell the two apart at this budget: the champion stays, and the reason "
                    "says how many paired seeds a decision needs",
    "rejected": "the meta made no valid structural revision: nothing was evaluated",
})

PROFICIENCY_ROUND = RoundPlan("proficiency", (
    Step("training_rollouts", (), "the champion scaffold played by the agent in service on a fresh block of "
                                  "training seeds; nothing while an adapter of an earlier round waits for its decision",
         stage=proficiency.start_proficiency_round, writes="runs/training/<game>/v<N>/<batch>/",
         dvc=("training_rollouts",), plays=True, after=("champion_scaffold",)),
    Step("sft_dataset", ("training_rollouts",), "the memory decisions that paid off, as chat examples; a dataset "
                                                "below the minimum ends the round before training",
         stage=proficiency.curate_stage, writes="runs/datasets/<game>/v<N>/<batch>/", dvc=("curate",)),
    Step("lora_config", ("sft_dataset",), "the LoRA settings (the meta-LLM's within bounds, or given)",
         stage=proficiency.lora_config_stage, writes="lora_config.json beside the dataset", dvc=("finetune",)),
    Step("lora_adapter", ("lora_config",), "the specialist trained, exported and registered as pending",
         stage=proficiency.train_stage, writes="runs/adapters/<game>/<id>/ and assets/specialists/<family>.json "
                                               "(pending)", dvc=("finetune",)),
    Step("specialist_evaluation", ("lora_adapter",), "the two-model agent against the agent in service on the "
                                                     "same fixed seeds",
         stage=proficiency.specialist_evaluation_specs, writes="runs/evaluations/<game>/v<N>/<batch>/ (each side)",
         dvc=("evaluate_specialist",), plays=True),
    Step("champion_specialist", ("specialist_evaluation",), "the gate's decision, recorded; the adapter serves the "
                                                            "memory role on a keep",
         stage=challenger.judge_challenger, writes="runs/decisions/<game>/specialist-<id>.json and the "
                                                           "registry's specialist in service", dvc=("decide_specialist",)),
), {
    "kept": "the gate judged the two-model agent better: the adapter is the specialist in service",
    "rolled_back": "the evidence rules out a gain worth having, or shows a loss: the specialist in service stays",
    "inconclusive": "the evidence cannot tell the two apart at this budget: the specialist in service stays",
    "dataset_too_small": "curation kept fewer examples than the minimum: nothing was trained or evaluated",
})
