"""``automem noise``, ``table``, ``evaluate`` and ``compare`` take their evaluation budget from the round options
(``loop/settings.StructureConfig``): with default flags they play the batch a default round evaluates
on, so a floor measured with defaults is the one a default round reads (issue 43, point 4)."""

import yaml

from automem_dagster import cli
from automem_dagster.commands import shared
from automem_dagster.commands.evaluate import COMPARED_OPTIONS, evaluation_budget
from automem_dagster.commands.noise import noise_settings
from automem_dagster.loop.evaluation import evaluation_spec
from automem_dagster.loop.settings import StructureConfig
from automem_dagster.loop.storage import load_champion


def _evaluation(settings):
    """The champion's evaluation batch under ``settings``: seeds, steps and folder (the batch's identity
    once played: the same folder holds the same scaffold, seeds and steps)."""
    spec = evaluation_spec(settings, load_champion(settings.family, shared.STORAGE), shared.STORAGE)
    return spec.seeds, spec.max_steps, spec.concurrency, spec.out_dir


def test_noise_with_default_flags_measures_the_evaluation_a_default_round_plays():
    noise = noise_settings(cli.build_parser().parse_args(["noise", "--game", "crafter"]))
    revise = shared.round_settings(cli.build_parser().parse_args(["revise", "--game", "crafter"]))
    assert _evaluation(noise) == _evaluation(revise) == _evaluation(StructureConfig().for_game("crafter"))


def test_noise_reads_a_params_file_and_its_eval_max_steps_flag(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"evaluate": {"episodes": 3, "max_steps": 7}}))
    from_file = noise_settings(cli.build_parser().parse_args(["noise", "--game", "crafter", "--settings", str(params)]))
    assert (from_file.budget.eval_episodes, from_file.budget.eval_max_steps) == (3, 7)
    given = noise_settings(cli.build_parser().parse_args(["noise", "--game", "crafter", "--eval-max-steps", "4"]))
    assert given.budget.eval_max_steps == 4 and given.budget.eval_episodes == StructureConfig().budget.eval_episodes


def test_table_defaults_are_the_round_options():
    args = cli.build_parser().parse_args(["table", "--game", "crafter"])
    given = shared.options_from_args(args, StructureConfig, shared.EVALUATION_OPTIONS)
    assert given == StructureConfig()


def test_evaluate_with_default_flags_plays_the_evaluation_a_default_round_plays():
    evaluate = evaluation_budget(cli.build_parser().parse_args(["evaluate", "--game", "crafter"]))
    assert _evaluation(evaluate) == _evaluation(StructureConfig().for_game("crafter"))
    given = evaluation_budget(cli.build_parser().parse_args(["evaluate", "--game", "crafter", "--eval-max-steps", "4"]))
    assert given.budget.eval_max_steps == 4


def test_compare_reads_the_runs_of_a_default_rounds_evaluation():
    args = cli.build_parser().parse_args(["compare", "--game", "crafter"])
    compared = shared.options_from_args(args, StructureConfig, COMPARED_OPTIONS)
    assert compared.budget == StructureConfig().budget
