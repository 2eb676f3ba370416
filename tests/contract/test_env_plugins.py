"""Environment plugins: the contract's checks, and the example plugin installed from its own folder.

The example (``examples/env_plugin``) is pip-installed into a scratch folder (``--target``, no
dependencies, so the shared environment is not changed) and put on ``PYTHONPATH`` of fresh
processes only: there the entry point must find it, a rollout must play it, a structure round
with the rules meta must run on it, and Dagster must list it as a partition.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from automem_dagster.games import PluginError, make_game
from automem_dagster.games.plugin import ENTRY_POINT_GROUP
from automem_dagster.paths import ASSETS
from automem_dagster.rollout.trajectory import read_trajectory

ROOT = Path(__file__).resolve().parents[2]


EXAMPLE = ROOT / "examples" / "env_plugin"
LOG_EVERY = yaml.safe_load((EXAMPLE / "automem_hotcold" / "scaffold_v0.yaml").read_text())["routine"]["log_every"]
"""The example plugin's v0 routine: plain moves LOG once every this many steps."""


BROKEN_PLUGINS = {
    "broken_env.py": 'ENVIRONMENT = {"family": "broken"}\n',
    "halfway_env.py": textwrap.dedent("""
        from automem_dagster.games.plugin import Environment
        from automem_dagster.paths import ASSETS

        class Halfway:  # no packages, no world_fingerprint
            name, max_steps, default_action = "halfway", 5, "wait"
            def actions(self): return {"wait": "wait"}
            def parse_action(self, text): ...
            def reset(self, seed): ...
            def step(self, action): ...
            def close(self): ...

        ENVIRONMENT = Environment(family="halfway", make=lambda task, steps: Halfway(), goal="wait",
                                  scaffold=ASSETS / "scaffolds" / "crafter" / "v0.yaml", eval_seeds=(1,))
    """),
    "plugins-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: plugins\nVersion: 0.1\n",
    "plugins-0.1.dist-info/entry_points.txt": (f"[{ENTRY_POINT_GROUP}]\nbroken = broken_env:ENVIRONMENT\n"
                                               "halfway = halfway_env:ENVIRONMENT\nmisnamed = halfway_env:ENVIRONMENT\n"),
}


@pytest.mark.contract
def test_broken_installed_plugins_are_named_and_break_only_their_own_games(tmp_path):
    """Real entry points (a distribution's metadata on the path of a fresh process), one per fault."""
    for name, text in BROKEN_PLUGINS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    probe = textwrap.dedent("""
        import json
        from automem_dagster.games import PluginError, env_ref, families, make_game
        said = {}
        for game in ("broken", "halfway", "misnamed"):
            try:
                make_game(game)
            except PluginError as exc:
                said[game] = str(exc)
        print(json.dumps({"families": families(), "crafter": env_ref("crafter").family, "said": said}))
    """)
    shown = json.loads(_run(tmp_path, ["-c", probe]).stdout.splitlines()[-1])
    assert shown["families"][-1] == "halfway" and shown["crafter"] == "crafter"
    said = shown["said"]
    assert said["broken"].startswith(f"environment plugin 'broken' (broken_env:ENVIRONMENT, entry point group "
                                     f"{ENTRY_POINT_GROUP}): expected an automem_dagster.games.plugin.Environment")
    assert "its game Halfway lacks packages, world_fingerprint()" in said["halfway"]
    assert "the entry point is named 'misnamed' but the environment's family is 'halfway'" in said["misnamed"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example pip-installed into a scratch target (built from a copy, so the checkout stays clean)."""
    work = tmp_path_factory.mktemp("plugin")
    shutil.copytree(EXAMPLE, work / "src")
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(work / "src")], check=True, timeout=120)
    return target


def _run(installed: Path, args: list[str], home: Path | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(installed), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, **({"AUTOMEM_HOME": str(home)} if home else {})}
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _project(tmp_path: Path) -> Path:
    """A scratch project home: the shipped assets, so rounds write lineage and runs there."""
    home = tmp_path / "home"
    shutil.copytree(ASSETS, home / "assets")
    return home


PROBE = textwrap.dedent("""
    import json, sys
    from automem_dagster.cli import main
    from automem_dagster.defs.execution.partitions import game_of, game_partitions
    from automem_dagster.games import env_ref, families
    rollout, revise = json.loads(sys.argv[1])
    assert main(rollout) == 0 and main(revise) == 0
    print(json.dumps({"families": families(), "plugin": env_ref("hotcold:line12").plugin.make.__module__,
                      "partitions": game_partitions.get_partition_keys(), "game": game_of("hotcold-line12")}))
""")
"""One fresh process, so the imports are paid once: a rollout and a structure round through the CLI's
own entry (``automem_dagster.cli.main``), then what the entry point and Dagster's partitions show."""


def test_the_installed_example_is_found_plays_a_rollout_and_a_rules_meta_round_and_is_a_partition(
        installed, scripted, tmp_path):
    server = scripted([{"match": "Phase: LOG", "reply": "<|APPEND|>notes.txt|stepped\n<|DONE|>"},
                       {"match": "Phase: PLAN", "reply": "<|ACTION|>step_right<|END|>"}])
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"game": {"name": "game", "base_url": server.base_url, "constrained": "none",
                                                  "max_retries": 1},
                                         "meta": {"kind": "rules"}}))
    home, out = _project(tmp_path), tmp_path / "batch"
    rollout = ["rollout", "--game", "hotcold:line12", "--seeds", "42,43", "--rollout-max-steps", str(LOG_EVERY + 1),
               "--endpoints", str(endpoints), "--out", str(out)]
    revise = ["revise", "--game", "hotcold:line12", "--rollout-episodes", "2", "--rollout-max-steps", str(LOG_EVERY + 1),
              "--eval-episodes", "2", "--eval-max-steps", "4", "--endpoints", str(endpoints), "--no-tracking"]
    shown = json.loads(_run(installed, ["-c", PROBE, json.dumps([rollout, revise])], home).stdout.splitlines()[-1])

    assert shown["families"] == ["crafter", "minihack", "nethack", "babyai", "textworld", "keydoor", "courier", "hotcold"]
    assert shown["plugin"] == "automem_hotcold" and shown["game"] == "hotcold:line12"
    assert shown["partitions"] == ["crafter", "minihack-Corridor-R3", "nethack", "babyai-GoToLocal",
                                   "textworld-coin_collector", "keydoor-hall4-decoys2", "courier-walk3-parcels3",
                                   "hotcold-line12"]

    header, steps, end = read_trajectory(out / "trajectories" / "hotcold-line12__seed42.jsonl")
    assert header["game"] == "hotcold:line12" and header["scaffold"]["game"] == "hotcold"
    assert [s["action"] for s in steps] == ["step_right"] * (LOG_EVERY + 1) and "of 12." in steps[0]["observation"]
    notes = out / "memory" / "hotcold-line12__seed42" / "files" / "notes.txt"
    assert notes.read_text().count("stepped") == 1  # plain moves: one LOG turn, at step LOG_EVERY

    # The rules meta proposed a structural revision, both versions were evaluated on the plugin's
    # seeds, and the tie on 2 seeds is inconclusive (the default significant gate), so v0 stays: the
    # lineage is the plugin family's, in the scratch home.
    lineage = json.loads((home / "assets" / "lineage" / "hotcold.json").read_text())
    assert lineage["game"] == "hotcold" and [v["decision"] for v in lineage["versions"]] == ["baseline", "inconclusive"]
    assert (home / "assets" / "scaffolds" / "hotcold" / "v1.yaml").is_file()

    with pytest.raises(PluginError, match="unknown game 'hotcold:line12'"):  # not installed in this process
        make_game("hotcold:line12")
