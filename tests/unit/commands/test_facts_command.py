"""``automem facts`` refuses a game without needed facts and a seed count it cannot play, before any
server starts, and its table pairs each specialist with the base on the same seeds."""

from pathlib import Path

from automem_dagster.cli import main as cli_main
from automem_dagster.commands.facts import facts_table
from automem_dagster.meta.fact_notes import FactRate


def test_a_game_without_needed_facts_and_too_many_seeds_are_refused_by_name(capsys):
    assert cli_main(["facts", "--game", "crafter", "--eval-episodes", "5"]) == 2
    assert "names no needed facts" in capsys.readouterr().err
    assert cli_main(["facts", "--game", "keydoor", "--eval-episodes", "41"]) == 2  # key and door has 40
    assert "has 40 evaluation seeds" in capsys.readouterr().err


def test_the_table_gives_each_arm_and_the_paired_difference_from_the_base():
    seeds = range(42, 52)
    rates = {"base": FactRate(1, 10, {s: float(s == 42) for s in seeds}),
             "positive-adapter": FactRate(10, 10, dict.fromkeys(seeds, 1.0))}
    text = facts_table("keydoor:hall4-decoys2", "v0", Path("e.yaml"), rates, Path("/out"))
    assert "10 seeds" in text
    assert "| base | 1/10 | 10.0 ± 9.5 |" in text
    assert "| positive-adapter | 10/10 | 100.0 ± 0.0 |" in text
    assert "| positive-adapter − base | +90.0 |" in text
    assert '"positive-adapter": "/out/positive-adapter"' in text
