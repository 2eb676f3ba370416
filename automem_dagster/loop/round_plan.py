"""Each loop's round, described once: its steps in order, what each reads, and where each runs.

A round is the same steps whoever runs it. Dagster runs each step as the asset of the same name (the
round jobs select ``round_steps``, the promotion jobs ``decision``, and the CLI runs the whole plan
as one Dagster run, ``defs/cli_rounds.py``); DVC runs each as the stages ``dvc`` names
(``dvc.yaml``). The rules inside the steps are written once too, in the functions every executor
calls: how a round starts (``structure.start_round``, ``proficiency.start_proficiency_round``: resume
an undecided challenger, else play the champion on ``seed_blocks.round_seeds``), the gate
(``loop.gate`` under the round's ``GatePolicy``) and what a decision does (``challenger.decide_challenger``).
``tests/unit/loop/test_round_plan.py`` checks the Dagster asset graph and ``dvc.yaml`` against these plans.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One step of a round: ``name`` (its Dagster asset), the steps whose results it ``reads``, what
    it ``makes``, and the DVC stages that run it (none where DVC has no such step)."""

    name: str
    reads: tuple[str, ...]
    makes: str
    dvc: tuple[str, ...] = ()


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


STRUCTURE_ROUND = RoundPlan("structure", (
    Step("rollout_batch", (), "the champion scaffold played on a fresh block of training seeds; nothing while a "
                              "candidate of an earlier round waits for its decision (it is resumed)", ("rollout",)),
    Step("diagnosis", ("rollout_batch",), "the meta's findings on those trajectories, each citing a step", ("diagnose",)),
    Step("scaffold_candidate", ("diagnosis",), "a revision of the champion: the next scaffold version, pending in "
                                               "the lineage, or the reason there is none", ("revise",)),
    Step("candidate_evaluation", ("scaffold_candidate",), "candidate and champion on the same fixed evaluation seeds",
         ("evaluate_candidate", "evaluate_champion")),
    Step("champion_scaffold", ("candidate_evaluation",), "the gate's decision, recorded; the candidate becomes the "
                                                         "champion on a keep", ("decide",)),
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
         ("training_rollouts",)),
    Step("sft_dataset", ("training_rollouts",), "the memory decisions that paid off, as chat examples; a dataset "
                                                "below the minimum ends the round before training", ("curate",)),
    Step("lora_config", ("sft_dataset",), "the LoRA settings (the meta-LLM's within bounds, or given)", ("finetune",)),
    Step("lora_adapter", ("lora_config",), "the specialist trained, exported and registered as pending", ("finetune",)),
    Step("specialist_evaluation", ("lora_adapter",), "the two-model agent against the agent in service on the "
                                                     "same fixed seeds", ("evaluate_specialist",)),
    Step("champion_specialist", ("specialist_evaluation",), "the gate's decision, recorded; the adapter serves the "
                                                            "memory role on a keep", ("decide_specialist",)),
), {
    "kept": "the gate judged the two-model agent better: the adapter is the specialist in service",
    "rolled_back": "the evidence rules out a gain worth having, or shows a loss: the specialist in service stays",
    "inconclusive": "the evidence cannot tell the two apart at this budget: the specialist in service stays",
    "dataset_too_small": "curation kept fewer examples than the minimum: nothing was trained or evaluated",
})
