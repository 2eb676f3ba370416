"""A known-answer check of the proficiency loop's training (issue 53, point 6), not the paper's result:
LoRA training on memory decisions with a positive effect (noting the key's wing when key and door's
sign shows it) raises the specialist's rate of that decision on held-out seeds above the base
model's; the same training on as many junk decisions (notes the door never needs, on the same
prompts) does not raise it as far. Real trainer, real GGUF export, real embedded server, the
two-model agent with the rule actor; the datasets and the measure are in ``keydoor_learning``.

Measured on the 2-core machine (``docs/results.md``): base 0/18, positive 18/18, junk 0/18 notes of
the wing (the junk specialist wrote a note every time, never a wing). At 12 steps of batch 2 without
activation checkpointing (2026-12-07, alone beside a load of 2, one thread each): the same 0/18, 18/18
and 0/18, validation losses 2.21 -> 0.25 and 2.37 -> 0.29, 318 s of wall and 315 s of CPU time, of which the
two trainings about 77 s each and the three played arms 50-60 s each; at batch 4 with checkpointing it
had taken 472 s of CPU time. The bar is three standard errors, one-sided, on the paired seeds: a paired permutation p of
at most 0.00135, which 18 seeds reach once the specialist is ahead on 10 more seeds than it is behind.
"""

import pytest
from keydoor_learning import GAME, free_v0, play_to_the_sign, sign_messages, train_specialist

from automem_dagster.meta.decisions import extract_decisions
from automem_dagster.metrics.paired import compare_paired
from automem_dagster.rollout.seeds import eval_seeds, training_seeds
from automem_dagster.rollout.trajectory import finished_episodes

TRAINING_SEEDS = 16
HELD_OUT = 18
STEPS = 12
"""Optimizer steps of batch 2 (``keydoor_learning.SETTINGS``) over the 14 training decisions (two episodes
validate): about 1.7 epochs. Fewer updates lose the control (measured 2026-12-06 at 6 steps of batch 4,
both validation losses below half their start): positive 15/18, junk 7/18, base 0/18. Half-trained, the
junk specialist has learnt to write a note at the sign but not yet its own words, so it copies the wing
from the sign; its permutation p of 0.019 would fail the bar. At 12 updates it writes only its own notes
(0/18) whether each update sees 4 decisions or 2 (measured 2026-12-07), so the 12 updates stay and each
takes 2 decisions: half the trainings' CPU time."""
THREE_SE = 0.00135
"""The one-sided normal tail beyond three standard errors: the bar each comparison's p must clear."""


@pytest.mark.integration
@pytest.mark.server
def test_training_on_useful_notes_raises_their_rate_and_junk_does_not(tmp_path):
    scaffold = free_v0()
    train, held = training_seeds(GAME, TRAINING_SEEDS), eval_seeds(GAME)[:HELD_OUT]
    assert not set(train) & set(held)
    positive, positive_run = train_specialist("positive", scaffold, train, tmp_path, STEPS)
    junk, junk_run = train_specialist("junk", scaffold, train, tmp_path, STEPS)
    for run in (positive_run, junk_run):  # both learnt what they were shown, so the control is a real one
        assert run.final_validation_loss < run.initial_validation_loss / 2, run.validation_loss
    rates = {"base": play_to_the_sign(scaffold, held, tmp_path / "base"),
             "positive": play_to_the_sign(scaffold, held, tmp_path / "positive", positive),
             "junk": play_to_the_sign(scaffold, held, tmp_path / "junk", junk)}
    shown = {arm: f"{r.written}/{r.shown}" for arm, r in rates.items()}
    print("notes of the key's wing at the sign, held-out seeds:", shown)
    assert all(r.shown == HELD_OUT for r in rates.values()), shown
    over_base = compare_paired(rates["positive"].per_seed, rates["base"].per_seed)
    over_junk = compare_paired(rates["positive"].per_seed, rates["junk"].per_seed)
    assert over_base.p_value <= THREE_SE and over_base.mean_difference > 0, (shown, over_base)
    assert over_junk.p_value <= THREE_SE and over_junk.mean_difference > 0, (shown, over_junk)
    # The specialist was trained on what the agent shows it: curation's rebuild of a played sign LOG
    # from its trajectory is the prompt the dataset holds for that seed.
    episode = finished_episodes(tmp_path / "positive")[0]
    played = next(d for d in extract_decisions(episode, scaffold) if d.step == 1 and d.phase == "log")
    assert played.examples[0]["prompt"] == sign_messages(scaffold, played.seed)
