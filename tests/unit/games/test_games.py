"""Game adapters: exact reproducibility, BALROG progression, tolerant action parsing, naming.

Real environments run here (NLE steps in microseconds; a Crafter world takes about a second
to generate), so the Crafter tests share one module-scoped episode pair to keep resets few.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from automem_dagster.games import families, game_family, make_game, minihack_env_id
from automem_dagster.games.actions import describe_offset, normalize
from automem_dagster.games.nethack_game import NO_PROGRESS_LIMIT
from automem_dagster.games.nle_text import crop_map, inventory_counts, screen_overlay
from automem_dagster.games.progression import (
    crafter_progression,
    load_nethack_table,
    minihack_progression,
    nethack_progression,
)

CRAFTER_ACTIONS = [
    "noop", "move_west", "move_east", "move_north", "move_south", "do", "sleep", "place_stone", "place_table",
    "place_furnace", "place_plant", "make_wood_pickaxe", "make_stone_pickaxe", "make_iron_pickaxe",
    "make_wood_sword", "make_stone_sword", "make_iron_sword",
]
CRAFTER_SEQUENCE = ["move_north", "move_north", "do", "move_west", "do", "move_east", "move_east", "do", "noop",
                    "move_south", "do", "place_table", "move_south", "move_west", "do", "move_north", "do", "sleep",
                    "move_east", "do"]
NLE_SEQUENCE = ["north", "east", "far_west", "search", "south", "southeast", "far_east", "west", "northwest", "esc",
                "north", "far_south", "east", "wait", "southwest", "far_north", "west", "search", "northeast", "south"]
CORRIDOR_SEQUENCE = ["north", "east", "east", "south", "search", "west", "southeast", "open", "kick", "north",
                     "east", "east", "east", "northeast", "search", "south", "south", "west", "east", "east"]


def play(game, seed: int, actions: list[str]) -> list[tuple[str, float, bool]]:
    """Observation, progression and done flag after reset and after each action (stops when done)."""
    result = game.reset(seed)
    trace = [(result.observation, result.progression, result.done)]
    for action in actions:
        if result.done:
            break
        result = game.step(action)
        trace.append((result.observation, result.progression, result.done))
    return trace





def test_game_family_and_minihack_ids():
    assert families()[:3] == ("crafter", "minihack", "nethack")
    assert game_family("crafter") == "crafter"
    assert game_family(" NetHack ") == "nethack"
    assert game_family("minihack:Corridor-R3") == "minihack"
    assert game_family("MiniHack-Quest-Easy-v0") == "minihack"
    assert minihack_env_id("minihack:Corridor-R3") == "MiniHack-Corridor-R3-v0"
    assert minihack_env_id("MiniHack-Corridor-R3-v0") == "MiniHack-Corridor-R3-v0"
    assert minihack_env_id("minihack:Sokoban1a-v1") == "MiniHack-Sokoban1a-v1"


@pytest.mark.parametrize("name", ["chess", "minihack", "MiniHack-Corridor-R3"])
def test_unknown_family_names_the_input_and_the_choices(name):
    with pytest.raises(ValueError) as error:
        game_family(name)
    assert repr(name) in str(error.value)
    assert "'crafter'" in str(error.value) and "minihack:Corridor-R3" in str(error.value)


def test_make_game_names_and_budgets():
    with pytest.raises(ValueError, match="NoSuchTask"):
        make_game("minihack:NoSuchTask")
    with make_game("MiniHack-Corridor-R3-v0") as full, make_game("minihack:Corridor-R3", max_steps=7) as short:
        assert full.name == short.name == "minihack:Corridor-R3"
        assert (full.max_steps, short.max_steps) == (100, 7)
    assert make_game("crafter").max_steps == 2000
    with make_game("nethack", max_steps=50) as nethack:
        assert nethack.max_steps == 50 and nethack.default_action == "esc"





def test_crafter_progression_counts_unlocked_of_22():
    assert crafter_progression({}) == 0.0
    assert crafter_progression({"collect_wood": 3, "place_table": 1, "eat_cow": 0}) == pytest.approx(2 / 22)
    assert crafter_progression({f"a{i}": 1 for i in range(22)}) == 1.0


def test_minihack_progression_is_solved_flag():
    assert minihack_progression(False) == 0.0
    assert minihack_progression(True) == 1.0


def test_nethack_table_values_and_max_rule():
    table = load_nethack_table()
    expected = {"Dlvl:2": 0.01539, "Dlvl:5": 0.02648, "Dlvl:10": 0.12559, "Xp:2": 0.01848, "Xp:5": 0.02911,
                "Xp:10": 0.17910, "Dlvl:1": 0.0, "Xp:1": 0.0}
    assert {key: round(table[key], 5) for key in expected} == expected
    assert nethack_progression(1, 1, table) == 0.0
    assert nethack_progression(10, 2, table) == table["Dlvl:10"]  # depth dominates
    assert nethack_progression(5, 10, table) == table["Xp:10"]  # experience dominates
    assert nethack_progression(999, 0, table) == 0.0  # levels missing from the table count 0
    table["Dlvl:2"] = 1.0
    assert load_nethack_table()["Dlvl:2"] != 1.0  # callers get a copy





def test_normalize_and_offsets():
    assert normalize("  'Move North.' ") == "move_north"
    assert normalize("**far north-east**") == "far_northeast"
    assert describe_offset(0, -3, diagonal=False) == "3 steps to your north"
    assert describe_offset(1, 0, diagonal=True) == "1 step to your east"
    assert describe_offset(2, 2, diagonal=True) == "2 steps to your southeast"
    assert describe_offset(2, 2, diagonal=False) == "2 steps south and 2 steps east"
    assert describe_offset(-4, -1, diagonal=True) == "1 step north and 4 steps west"


@pytest.fixture(scope="module")
def crafter():
    game = make_game("crafter", max_steps=40)
    yield game
    game.close()


@pytest.mark.parametrize(
    ("text", "action"),
    [("noop", "noop"), (" 'Move North.' ", "move_north"), ("MOVE_WEST", "move_west"), ("up", "move_north"),
     ("left", "move_west"), ("go east", "move_east"), ("move_down", "move_south"), ("interact", "do"),
     ("Attack!", "do"), ("collect", "do"), ("wait", "noop"), ("Make Wooden Pickaxe", "make_wood_pickaxe"),
     ("place-table", "place_table"), ("Action: sleep", "sleep"), ("`do`", "do")],
)
def test_crafter_parse_tolerance(crafter, text, action):
    assert crafter.parse_action(text).action == action
    assert crafter.parse_action(text).valid


def test_invalid_text_falls_back_to_default_with_note(crafter):
    parsed = crafter.parse_action("I think I should dance")
    assert (parsed.action, parsed.valid) == ("noop", False)
    assert "no valid action" in parsed.note and "'noop'" in parsed.note and "dance" in parsed.note


@pytest.fixture(scope="module")
def nethack():
    game = make_game("nethack", max_steps=400)
    yield game
    game.close()


@pytest.mark.parametrize(
    ("text", "action"),
    [("far north", "far_north"), ("Far-North", "far_north"), ("run west", "far_west"), ("k", "north"),
     ("move north", "north"), ("left", "west"), ("north east", "northeast"), ("NE", "northeast"),
     ("up", "up"), ("down", "down"), ("wait", "wait"), ("ESC", "esc"), ("escape", "esc"), ("pick up", "pickup"),
     (">", "down"), (",", "pickup"), ("d", "drop"), ("7", "num_7"), ("'search'", "search")],
)
def test_nethack_parse_tolerance(nethack, text, action):
    parsed = nethack.parse_action(text)
    assert (parsed.action, parsed.valid) == (action, True)


def test_nethack_invalid_defaults_to_esc(nethack):
    parsed = nethack.parse_action("hmm, not sure")
    assert (parsed.action, parsed.valid) == ("esc", False) and "'esc'" in parsed.note


def test_minihack_synonyms_follow_the_task_action_set():
    with make_game("minihack:Corridor-R3") as corridor, make_game("minihack:MazeWalk-9x9") as maze:
        assert corridor.default_action == "search"
        assert corridor.parse_action("wait").action == "search"  # Corridor has no wait action
        assert corridor.parse_action("up").action == "north"  # ...and no stairs-up action
        assert corridor.parse_action("gibberish") == corridor.parse_action("gibberish")
        assert corridor.parse_action("gibberish").action == "search"
        assert "search" not in maze.actions() and maze.default_action == "north"





def test_action_sets(crafter, nethack):
    assert list(crafter.actions()) == CRAFTER_ACTIONS
    actions = nethack.actions()
    assert len(actions) == 121 and "esc" in actions and "far_southwest" in actions
    assert all(re.fullmatch(r"[a-z0-9_]+", name) and text for name, text in actions.items())
    with make_game("minihack:Corridor-R3") as corridor:
        assert list(corridor.actions()) == ["north", "east", "south", "west", "northeast", "southeast", "southwest",
                                            "northwest", "open", "kick", "search"]





def test_crafter_same_seed_same_episode_and_progression_matches_rule(crafter):
    first = play(crafter, 42, CRAFTER_SEQUENCE)
    result = crafter.step("noop")
    assert result.progression == crafter_progression(result.info["achievements"])
    assert result.state.vitals.keys() == {"health", "food", "drink", "energy"}
    other = make_game("crafter", max_steps=40)
    assert play(other, 42, CRAFTER_SEQUENCE) == first
    assert play(other, 43, CRAFTER_SEQUENCE)[0][0] != first[0][0]
    assert all(len(observation) < 600 for observation, _, _ in first)


def test_crafter_budget_ends_episode_and_step_after_end_raises():
    game = make_game("crafter", max_steps=3)
    game.reset(7)
    results = [game.step("noop") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True] and results[-1].info["end_reason"] == "step_budget"
    with pytest.raises(RuntimeError):
        game.step("noop")


def test_nethack_same_seed_same_episode(nethack):
    first = play(nethack, 42, NLE_SEQUENCE)
    with make_game("nethack") as other:  # a second env alive at the same time
        assert play(other, 42, NLE_SEQUENCE) == first
        assert play(other, 43, NLE_SEQUENCE)[0][0] != first[0][0]
    assert play(nethack, 42, NLE_SEQUENCE) == first  # and the same env again after other episodes


def test_minihack_same_seed_same_episode():
    with make_game("minihack:Corridor-R3") as game, make_game("minihack:Corridor-R3") as other:
        first = play(game, 42, CORRIDOR_SEQUENCE)
        assert play(other, 42, CORRIDOR_SEQUENCE) == first
        assert play(other, 44, CORRIDOR_SEQUENCE)[0][0] != first[0][0]
        assert all(len(observation) < 600 for observation, _, _ in first)





def test_minihack_solving_sets_progression_to_one():
    """Walk to the stairs using only the observation text, as a model would."""
    pattern = re.compile(r"staircase down (?:\d+ steps? to your (\w+)|\d+ steps? (north|south) and \d+ steps? (east|west))")
    with make_game("minihack:Room-5x5", max_steps=20) as game:
        result = game.reset(3)
        assert result.progression == 0.0
        while not result.done:
            match = pattern.search(result.observation)
            assert match, result.observation
            result = game.step(match[1] or match[2] + match[3])
            assert result.progression == (1.0 if result.info["solved"] else 0.0)
        assert result.info["end_reason"] == "task_successful" and result.progression == 1.0
        assert result.reward >= 1.0 and "The game is over" in result.observation
        assert result.state.position is not None and result.state.position != (0, 0)


def test_nethack_ends_after_150_steps_without_the_turn_counter_moving(nethack):
    start = nethack.reset(5)
    result = start
    for _ in range(NO_PROGRESS_LIMIT - 1):
        result = nethack.step("esc")  # esc outside a prompt costs no game time
    assert not result.done and result.info["turn"] == start.info["turn"]
    assert result.info["steps_without_turn"] == NO_PROGRESS_LIMIT - 1
    result = nethack.step("esc")
    assert result.done and result.info["end_reason"] == "no_progress"
    with pytest.raises(RuntimeError):
        nethack.step("esc")
    # A step that spends game time resets the count.
    nethack.reset(5)
    for _ in range(NO_PROGRESS_LIMIT - 1):
        nethack.step("esc")
    moved = nethack.step("search")
    assert not moved.done and moved.info["steps_without_turn"] == 0


def test_nethack_state_menu_and_budget(nethack):
    result = nethack.reset(42)
    assert result.state.level["depth"] == 1 and result.state.level["xp_level"] == 1 and result.progression == 0.0
    assert result.state.position == tuple(int(v) for v in re.search(r"x=(\d+), y=(\d+)", result.observation).groups())
    assert sum(result.state.inventory.values()) >= 1 and "hp" in result.state.vitals
    menu = nethack.step("inventory")
    assert "On screen" in menu.observation and "(end)" in menu.observation
    assert "On screen" not in nethack.step("esc").observation
    with make_game("nethack", max_steps=2) as short:
        short.reset(1)
        assert [short.step("search").done for _ in range(2)] == [False, True]





def _screen(rows: list[str], width: int) -> np.ndarray:
    return np.array([[ord(c) for c in row.ljust(width)] for row in rows], dtype=np.uint8)


def test_crop_map_keeps_the_window_around_the_player():
    chars = _screen(["", "   -----", "   |.@.|", "   -----", "", "          x"], 12)
    assert crop_map(chars, (5, 2), width=5, height=3) == "-----\n|.@.|\n-----"
    assert crop_map(chars, (5, 2), width=3, height=1) == ".@."


def test_screen_overlay_finds_a_menu_drawn_over_the_map():
    chars = _screen(["......", "......"], 6)
    tty = _screen(["  menu", "..abc ", "......", "", ""], 7)
    assert screen_overlay(tty, chars) == "menu\nabc"
    assert screen_overlay(_screen(["msg", "......", "......"], 7), chars) == ""


def test_inventory_counts_parse_counts_and_articles():
    lines = ["a - a +0 katana (weapon in hand)", "d - 37 +0 ya (in quiver)", "$ - 1124 gold pieces", "f - wand"]
    assert inventory_counts(lines) == {"a - +0 katana (weapon in hand)": 1, "d - +0 ya (in quiver)": 37,
                                       "$ - gold pieces": 1124, "f - wand": 1}
