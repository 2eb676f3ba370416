"""Rounds and seed blocks without a server: a round that registered nothing still moves to the next
seed block, and ``automem rounds`` refuses a patience beyond its rounds."""

from cli_round_storage import storage as cli_round_storage

from automem_dagster import cli
from automem_dagster.loop.seed_blocks import next_block

storage = cli_round_storage  # the scratch project these CLI rounds run in (cli_round_storage.py)


def test_a_round_that_registered_nothing_still_moves_to_the_next_seed_block(storage):
    assert next_block("structure", "crafter", storage) == 0
    # The lineage did not advance (a rejected revision): the next round takes the next block anyway.
    assert next_block("structure", "crafter", storage, previous=0) == 1


def test_rounds_refuse_a_patience_beyond_the_rounds(storage, capsys):
    assert cli.main(["rounds", "--game", "crafter", "--max-rounds", "2", "--patience", "3", "--no-tracking"]) == 2
    assert "--patience 3" in capsys.readouterr().err
