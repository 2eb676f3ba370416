"""``automem rollout`` refuses bad input by name."""

import pytest

from automem_dagster.cli import main as cli_main
from automem_dagster.commands import shared
from automem_dagster.loop.seed_blocks import round_seeds
from automem_dagster.loop.settings import ProficiencyConfig, StructureConfig
from automem_dagster.rollout.seeds import eval_seeds, training_seeds
from automem_dagster.rollout.trajectory import read_manifest


def test_bad_cli_input_is_reported(capsys):
    assert cli_main(["rollout", "--game", "chess", "--rollout-episodes", "1"]) == 2
    assert "chess" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["rollout", "--game", "crafter", "--seeds", "4x"])


@pytest.fixture
def scratch_storage(monkeypatch, storage):
    monkeypatch.setattr(shared, "STORAGE", storage.storage())


def test_a_rollout_with_the_default_seeds_plays_training_seeds_never_evaluation_seeds(scratch_storage, tmp_path):
    """Evaluation seeds judge every decision, so curation excludes every episode played on one: a default
    rollout on them could never be curated. Its seeds are the game's first block of training seeds."""
    out = tmp_path / "batch"
    assert cli_main(["rollout", "--game", "keydoor", "--agent", "random", "--rollout-max-steps", "2",
                     "--out", str(out)]) == 0
    played = read_manifest(out)["seeds"]
    game, episodes = "keydoor:hall4-decoys2", StructureConfig().budget.rollout_episodes
    assert played == training_seeds(game, episodes, path=shared.STORAGE.seeds_file)
    assert not set(played) & set(eval_seeds(game, shared.STORAGE.seeds_file))


def test_rollout_episodes_must_count_the_seeds_given(capsys):
    assert cli_main(["rollout", "--game", "keydoor", "--seeds", "7,8", "--rollout-episodes", "3"]) == 2
    assert "--rollout-episodes 3 does not match the 2 seeds given" in capsys.readouterr().err


def test_a_proficiency_rollout_plays_that_loops_next_block_on_its_default_budget(scratch_storage, tmp_path):
    out = tmp_path / "batch"
    assert cli_main(["rollout", "--game", "keydoor", "--agent", "random", "--training", "proficiency",
                     "--out", str(out)]) == 0
    manifest = read_manifest(out)
    options = ProficiencyConfig().budget
    assert manifest["seeds"] == round_seeds("proficiency", "keydoor:hall4-decoys2", options.rollout_episodes,
                                            shared.STORAGE)
    assert manifest["max_steps"] == options.rollout_max_steps
