"""The project's own environments, registered through the same ``Environment`` record a plugin uses.

Each factory imports its simulator only when a game is built, so listing the families stays cheap.
The built-in families' evaluation seeds are written once, in ``assets/seeds/eval.yaml`` (data a round's DVC
stages depend on): their records carry none of their own (``FROM_SEED_FILE``); a plugin's own seeds apply only
where that file has no set for the family.
"""

from __future__ import annotations

import re

import automem_dagster.games.courier as courier
import automem_dagster.games.keydoor as keydoor
from automem_dagster.games.base import Game
from automem_dagster.games.registration import Environment
from automem_dagster.paths import SCAFFOLDS

BALROG_MINIHACK_TASKS = (
    "Boxoban-Hard",
    "Boxoban-Medium",
    "MazeWalk-9x9",
    "MazeWalk-15x15",
    "Corridor-R3",
    "CorridorBattle-Dark",
    "Quest-Easy",
    "Quest-Medium",
)
"""The MiniHack tasks of the BALROG benchmark (each ``MiniHack-<task>-v0``)."""



FROM_SEED_FILE: tuple[int, ...] = ()
"""A built-in family's own evaluation seeds: none. Its set is written once, in ``assets/seeds/eval.yaml``, and
``rollout.seeds.eval_seeds`` reads it there (a seed file without it is refused, naming the file)."""

_MINIHACK_ID = re.compile(r"^MiniHack-(.+?)(-v\d+)$")


def _budget(max_steps: int | None) -> dict:
    return {} if max_steps is None else {"max_steps": max_steps}


def _crafter(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.crafter_game import CrafterGame

    return CrafterGame(**_budget(max_steps))


def _nethack(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.nethack_game import NetHackGame

    return NetHackGame(**_budget(max_steps))


def minihack_env_id(name: str) -> str:
    """Gym id for a MiniHack name: "minihack:Corridor-R3" -> "MiniHack-Corridor-R3-v0"; full ids pass through."""
    key = name.strip()
    if _MINIHACK_ID.match(key):
        return key
    if not key.lower().startswith("minihack:"):
        raise ValueError(f"{name!r} is not a MiniHack game name: use minihack:<Task>, e.g. minihack:Corridor-R3")
    task = key[len("minihack:"):].strip().removeprefix("MiniHack-")
    return f"MiniHack-{task}" if re.search(r"-v\d+$", task) else f"MiniHack-{task}-v0"


def _minihack_canonical(name: str) -> str | None:
    """"MiniHack-Corridor-R3-v0" and "minihack:MiniHack-Corridor-R3-v0" -> "minihack:Corridor-R3"."""
    if not (_MINIHACK_ID.match(name) or name.lower().startswith("minihack:")):
        return None
    if name.lower().startswith("minihack:") and not name[len("minihack:"):].strip():
        return "minihack:"
    return "minihack:" + minihack_env_id(name)[len("MiniHack-"):].removesuffix("-v0")


def minihack_suite_tasks(task: str) -> tuple[str, ...] | None:
    """The tasks of a MiniHack suite name ("suite": the BALROG tasks; "Corridor-R3+MazeWalk-9x9": those),
    None for a single task (``games.minihack_suite``)."""
    if task == "suite":
        return BALROG_MINIHACK_TASKS
    if "+" not in task:
        return None
    tasks = tuple(t.strip() for t in task.split("+"))
    if any(not t for t in tasks) or len(set(tasks)) != len(tasks):
        raise ValueError(f"MiniHack suite 'minihack:{task}' must list distinct tasks joined by '+', "
                         "e.g. minihack:Corridor-R3+MazeWalk-9x9")
    return tasks


def _minihack(task: str, max_steps: int | None) -> Game:
    """One task's game, or a suite's (``minihack_suite_tasks``), its tasks checked before anything is built."""
    from automem_dagster.games.minihack_game import MiniHackGame
    from automem_dagster.games.minihack_suite import MiniHackSuite

    suite = minihack_suite_tasks(task)
    if suite is None:
        return MiniHackGame(_registered_minihack_id(task), name=f"minihack:{task}", **_budget(max_steps))
    for member in suite:
        _registered_minihack_id(member)
    return MiniHackSuite(f"minihack:{task}", suite, lambda member: _minihack(member, max_steps),
                         max_steps if max_steps is not None else 100)


def _registered_minihack_id(task: str) -> str:
    """The gym id of MiniHack ``task``; a ValueError names the BALROG tasks when gym has no such env."""
    import gymnasium as gym

    from automem_dagster.games.minihack_game import register_minihack

    env_id = minihack_env_id(f"minihack:{task}")
    register_minihack()
    if env_id not in gym.registry:
        tasks = ", ".join(f"minihack:{t}" for t in BALROG_MINIHACK_TASKS)
        raise ValueError(f"unknown game 'minihack:{task}': {env_id} is not a registered MiniHack env; "
                         f"use a registered MiniHack task (BALROG tasks: {tasks}) or a suite "
                         "(minihack:suite, or tasks joined by '+')")
    return env_id


def _keydoor(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.keydoor import make

    return make(task, max_steps)


def _courier(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.courier import make

    return make(task, max_steps)


def _babyai(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.babyai_game import BabyAIGame

    return BabyAIGame(task, max_steps)


def _textworld(task: str, max_steps: int | None) -> Game:
    from automem_dagster.games.textworld_game import TextWorldGame

    return TextWorldGame(task, max_steps)


BUILTIN = (
    Environment(
        family="crafter", make=_crafter, scaffold=SCAFFOLDS / "crafter" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, min_examples=500,
        goal=("You are an agent playing Crafter, a 2D survival and crafting game. Unlock as many of its 22 "
              "achievements as you can (collect wood, stone, coal, iron and diamond; place a table and a furnace; "
              "make pickaxes and swords; eat, drink, sleep; defeat zombies and skeletons) while keeping health, "
              "food, drink and energy up."),
    ),
    Environment(
        family="minihack", make=_minihack, scaffold=SCAFFOLDS / "minihack" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, tasks=("Corridor-R3",), canonical=_minihack_canonical,
        min_examples=300,
        goal=("You are an agent playing a MiniHack task, a small level of NetHack. Complete the task, usually by "
              "reaching the staircase down (>), in as few steps as you can."),
    ),
    Environment(
        family="nethack", make=_nethack, scaffold=SCAFFOLDS / "nethack" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, min_examples=800,
        goal=("You are an agent playing NetHack. Stay alive, gain experience levels and go down the stairs (>) to "
              "reach deeper dungeon levels."),
    ),
    Environment(
        family="babyai", make=_babyai, scaffold=SCAFFOLDS / "babyai" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE,
        tasks=("GoToLocal", "PickupLoc", "PutNextLocal", "OpenDoorLoc", "GoToObj"),
        goal=("You are an agent in BabyAI, a grid world of rooms with keys, balls, boxes and doors. Carry out the "
              "mission given in the observation (go to, pick up, open or put an object next to another) in as few "
              "steps as you can."),
    ),
    Environment(
        family="textworld", make=_textworld, scaffold=SCAFFOLDS / "textworld" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, tasks=("coin_collector",),
        goal=("You are an agent playing a TextWorld text adventure. Reach the objective given at the start by "
              "moving between rooms and acting on objects, in as few steps as you can."),
    ),
    Environment(
        family="keydoor", make=_keydoor, scaffold=SCAFFOLDS / "keydoor" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, tasks=(keydoor.knob_task(keydoor.DEFAULTS),),
        canonical=keydoor.canonical,
        knobs=keydoor.knobs, min_examples=30,
        goal=("You are an agent in a hallway that leads to a junction and on to a locked door. A sign in the hallway "
              "says once which wing (west or east) holds the key; other notes speak of other keys. At the junction "
              "choose the key's wing, once; then walk on and open the door."),
    ),
    Environment(
        family="courier", make=_courier, scaffold=SCAFFOLDS / "courier" / "v0.yaml",
        eval_seeds=FROM_SEED_FILE, tasks=(courier.knob_task(courier.DEFAULTS),),
        canonical=courier.canonical,
        knobs=courier.knobs, min_examples=30,
        goal=("You are a courier. At the depot each parcel's label says once where it goes (the mill, the farm or "
              "the dock); after a walk, each crossroads asks once which way a parcel goes, in the order loaded. "
              "Deliver every parcel to its place."),
    ),
)
"""The built-in families. Partitions and demos run each one's first task; any registered task can be played."""
