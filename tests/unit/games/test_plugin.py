"""Environment plugins: the contract's checks, and the example plugin installed from its own folder.

The example (``examples/env_plugin``) is pip-installed into a scratch folder (``--target``, no
dependencies, so the shared environment is not changed) and put on ``PYTHONPATH`` of fresh
processes only: there the entry point must find it, a rollout must play it, a structure round
with the rules meta must run on it, and Dagster must list it as a partition.
"""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from automem_dagster.cli import main as cli_main
from automem_dagster.games import PluginError, builtin, env_ref, families, plugin
from automem_dagster.games.builtin import BUILTIN
from automem_dagster.games.plugin import ENTRY_POINT_GROUP, Environment, validate_environment, validate_game
from automem_dagster.paths import ASSETS
from automem_dagster.rollout.seeds import SeedConfigError, eval_seeds, load_seed_config
from automem_dagster.rollout.trajectory import partial_path, read_trajectory


class Halfway:
    """A game that forgot the batch-identity members (``packages``, ``world_fingerprint``)."""

    name, max_steps, default_action = "halfway", 5, "wait"

    def actions(self):
        return {"wait": "wait"}

    def parse_action(self, text): ...

    def reset(self, seed): ...

    def step(self, action): ...

    def close(self): ...


def _record(**changes) -> Environment:
    fields = {"family": "halfway", "make": lambda task, steps: Halfway(),
              "scaffold": ASSETS / "scaffolds" / "crafter" / "v0.yaml", "eval_seeds": (1, 2), "goal": "wait"}
    return Environment(**{**fields, **changes})


def test_a_broken_record_is_refused_naming_every_fault():
    with pytest.raises(PluginError) as caught:
        validate_environment(_record(family="Half Way", scaffold=Path("/nowhere.yaml"), eval_seeds=(), goal=" "),
                             "plugin 'halfway'")
    message = str(caught.value)
    for fault in ("plugin 'halfway'", "family 'Half Way'", "scaffold /nowhere.yaml is not a file", "eval_seeds",
                  "goal is empty"):
        assert fault in message
    with pytest.raises(PluginError, match="expected an automem_dagster.games.plugin.Environment, got dict"):
        validate_environment({"family": "halfway"}, "plugin 'halfway'")


def test_a_game_lacking_contract_members_is_named_when_built():
    ref = env_ref("crafter").__class__("halfway", "halfway", "", validate_environment(_record(), "test"))
    with pytest.raises(PluginError, match=r"its game Halfway lacks packages, world_fingerprint\(\)"):
        ref.make()
    game = Halfway()
    game.packages = "minigrid"  # a string, not a tuple of names
    game.world_fingerprint = lambda: ""
    with pytest.raises(PluginError, match="packages must be a tuple"):
        validate_game(game, "test")


def test_names_resolve_once_into_references():
    assert families() == ("crafter", "minihack", "nethack", "babyai", "textworld", "keydoor", "courier")
    ref = env_ref("MiniHack-Quest-Easy-v0")
    assert (ref.name, ref.family, ref.task) == ("minihack:Quest-Easy", "minihack", "Quest-Easy")
    assert env_ref("minihack:Quest-Easy") is ref  # one reference per name, made once
    assert env_ref(" NetHack ").name == "nethack"
    with pytest.raises(PluginError, match="needs a task: use babyai:<task>, e.g. babyai:GoToLocal"):
        env_ref("babyai")
    with pytest.raises(PluginError, match=f"unknown game 'pong'.*{ENTRY_POINT_GROUP}"):
        env_ref("pong")


def test_a_game_that_does_not_replay_exactly_is_played_again_rather_than_resumed(tmp_path, monkeypatch):
    """``replays_exactly=False`` (here BabyAI's record, changed for the test): an interrupted episode
    is not resumed by replaying its record, it is played again from step 0 with a note saying why."""
    found, broken = plugin._registry()
    monkeypatch.setattr(plugin, "_registry", lambda: ({**found, "babyai": replace(found["babyai"], replays_exactly=False)},
                                                      broken))
    env_ref.cache_clear()
    plugin._reference.cache_clear()
    try:
        out = tmp_path / "batch"
        args = ["rollout", "--game", "babyai:GoToLocal", "--agent", "random", "--seeds", "42", "--rollout-max-steps", "3",
                "--out", str(out)]
        assert cli_main(args) == 0
        done = out / "trajectories" / "babyai-GoToLocal__seed42.jsonl"
        lines = done.read_text().splitlines()
        partial_path(done).write_text("\n".join(lines[:3]) + "\n")  # the header and two steps: an interrupted run
        done.unlink()
        assert cli_main(args) == 0
        header, steps, _ = read_trajectory(done)
        [resume] = header["resumes"]
        assert resume["at_step"] == 0 and "babyai does not replay exactly" in resume["note"] and len(steps) == 3
    finally:
        env_ref.cache_clear()
        plugin._reference.cache_clear()


def test_builtin_families_take_their_seeds_from_the_seed_file_alone(tmp_path):
    """The built-in families' seeds are written once, in assets/seeds/eval.yaml: their records carry none of
    their own (a second list that a change to the file would leave behind), and a seed file without a built-in
    family's set is refused naming the file, not played on other seeds."""
    shipped = load_seed_config()
    for env in BUILTIN:
        assert env.eval_seeds == builtin.FROM_SEED_FILE, env.family
        assert eval_seeds(env.default_game()) == shipped.eval[env.family], env.family
    partial = tmp_path / "eval.yaml"
    partial.write_text(yaml.safe_dump({"eval": {"crafter": [42]}, "training": {"first": 1000, "last": 1100}}))
    assert eval_seeds("crafter", partial) == [42]
    with pytest.raises(SeedConfigError, match=f"seed file {partial}: no eval.nethack set"):
        eval_seeds("nethack", partial)
