"""Crafter as a text game, with BALROG's settings (64x64 world, 9x9 view) and progression.

The observation names the nearest cell of each kind in the player's local view with the steps
to reach it, what the player faces, the four vitals out of 9 and the inventory. Grass, sand and
path are left out (they are everywhere and walkable), which keeps an observation at 200-450
characters: short prompts matter for small models and for prompt caching.
"""

from __future__ import annotations

import collections
from typing import Any

from automem_dagster.games.actions import ActionVocabulary, compass_aliases, describe_offset
from automem_dagster.games.base import GameState, ParsedAction, StepResult, world_digest
from automem_dagster.games.progression import crafter_progression

# Crafter's own action order (the env takes the index); names use compass words for moves.
# Costs of placing and crafting are filled in from Crafter's own rules when a game is built.
CRAFTER_ACTION_NAMES = (
    "noop", "move_west", "move_east", "move_north", "move_south", "do", "sleep",
    "place_stone", "place_table", "place_furnace", "place_plant",
    "make_wood_pickaxe", "make_stone_pickaxe", "make_iron_pickaxe", "make_wood_sword", "make_stone_sword", "make_iron_sword",
)

_BASIC_DESCRIPTIONS = {
    "noop": "do nothing this step",
    **{f"move_{d}": f"move one cell {d} (or turn to face {d} if blocked)" for d in ("west", "east", "north", "south")},
    "do": "interact with the faced cell: collect material, drink water, eat, attack",
    "sleep": "sleep to restore energy (wakes when energy is full or when hurt)",
}

_MOVES = {d: f"move_{d}" for d in ("north", "east", "south", "west")}

CRAFTER_ALIASES: dict[str, tuple[str, ...]] = {
    **compass_aliases(_MOVES),
    # Crafter's own names for the moves.
    "move_left": ("move_west",),
    "move_right": ("move_east",),
    "move_up": ("move_north",),
    "move_down": ("move_south",),
    **{word: ("do",) for word in ("interact", "attack", "collect", "mine", "chop", "hit", "use", "gather",
                                  "eat", "drink", "fight", "do_action", "interact_with", "harvest")},
    **{word: ("noop",) for word in ("wait", "no_op", "nothing", "idle", "stay", "none", "pass", "do_nothing")},
    "rest": ("sleep",),
    **{f"{verb}_{item}": (f"place_{item}",) for verb in ("put", "build") for item in ("stone", "table", "furnace", "plant")},
    "place_crafting_table": ("place_table",),
    "plant": ("place_plant",),
    "plant_sapling": ("place_plant",),
    **{
        f"{verb}_{material}_{tool}": (f"make_{canonical}_{tool}",)
        for verb in ("make", "craft", "build")
        for material, canonical in (("wood", "wood"), ("wooden", "wood"), ("stone", "stone"), ("iron", "iron"))
        for tool in ("pickaxe", "sword")
    },
}

VITALS = ("health", "food", "drink", "energy")
_HIDDEN_CELLS = {"grass", "sand", "path"}
_VIEW_HALF_WIDTH, _VIEW_HALF_HEIGHT = 4, 3  # the 9x7 map part of Crafter's 9x9 local view


class CrafterGame:
    """One Crafter episode at a time; ``reset(seed)`` builds a fresh world so seeds reproduce exactly.

    Crafter derives each world from (env seed, episode counter), so reusing one env across
    resets would make the world depend on how many episodes ran before; a new env per reset
    makes the seed alone decide the world. The world's per-chunk object sets are replaced by
    insertion-ordered ones (``ordered_chunks``), or creature balancing would depend on memory
    addresses and the same seed would play differently in another process.
    """

    name = "crafter"
    default_action = "noop"
    packages = ("crafter", "numpy", "opensimplex", "numba")

    def __init__(self, max_steps: int = 2000) -> None:
        import crafter  # imported here so that importing the games package stays cheap

        self._crafter = crafter
        self.max_steps = max_steps
        self._vocabulary = ActionVocabulary(_describe_actions(crafter.constants), self.default_action, CRAFTER_ALIASES)
        self._action_index = {name: index for index, name in enumerate(CRAFTER_ACTION_NAMES)}
        self._env: Any = None
        self._steps = 0
        self._done = True

    def actions(self) -> dict[str, str]:
        return dict(self._vocabulary.descriptions)

    def parse_action(self, text: str) -> ParsedAction:
        return self._vocabulary.parse(text)

    def reset(self, seed: int) -> StepResult:
        self.close()
        self._env = self._crafter.Env(area=(64, 64), view=(9, 9), length=self.max_steps, seed=seed)
        self._env.reset()
        ordered_chunks(self._env._world)
        self._steps = 0
        self._done = False
        self._first = self._result(reward=0.0, done=False)
        return self._first

    def world_fingerprint(self) -> str:
        """The first observation and state, the whole 64x64 material map and every object's kind and cell."""
        if self._env is None:
            raise RuntimeError("no world yet: call reset(seed) first")
        world = self._env._world
        objects = sorted((type(o).__name__, int(o.pos[0]), int(o.pos[1])) for o in world.objects)
        return world_digest(self._first, world._mat_map.tobytes(), repr(objects).encode())

    def step(self, action: str) -> StepResult:
        if self._env is None or self._done:
            raise RuntimeError("the episode is over (or never started): call reset(seed) first")
        if action not in self._action_index:
            raise ValueError(f"unknown Crafter action {action!r}; use parse_action() to resolve model text")
        _, reward, done, _ = self._env.step(self._action_index[action])
        self._steps += 1
        self._done = bool(done) or self._steps >= self.max_steps
        return self._result(reward=float(reward), done=self._done)

    def close(self) -> None:
        """Drop the world; Crafter holds no OS resources, so releasing the reference frees it."""
        self._env = None
        self._done = True

    def __enter__(self) -> CrafterGame:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _result(self, reward: float, done: bool) -> StepResult:
        player = self._env._player
        achievements = {name: int(count) for name, count in player.achievements.items()}
        info: dict[str, Any] = {
            "step": self._steps,
            "achievements": achievements,
            "unlocked": sorted(name for name, count in achievements.items() if count > 0),
        }
        if done:
            info["end_reason"] = "death" if player.health <= 0 else "step_budget"
        return StepResult(
            observation=self._describe(),
            reward=reward,
            done=done,
            progression=crafter_progression(achievements),
            state=self._state(len(info["unlocked"])),
            info=info,
        )

    def _state(self, unlocked: int) -> GameState:
        player = self._env._player
        inventory = {k: int(v) for k, v in player.inventory.items() if k not in VITALS and v > 0}
        vitals = {k: float(player.inventory[k]) for k in VITALS}
        x, y = (int(c) for c in player.pos)
        return GameState(position=(x, y), inventory=inventory, vitals=vitals, level={"achievements": unlocked})

    def _describe(self) -> str:
        player = self._env._player
        lines = []
        if player.health <= 0:
            lines.append("You died.")
        elif player.sleeping:
            lines.append("You are sleeping and cannot act until your energy is restored.")
        seen = self._nearest_cells()
        if seen:
            lines.append("You see:")
            lines.extend(f"- {kind} {describe_offset(dx, dy, diagonal=False)}" for kind, (dx, dy) in seen.items())
        else:
            lines.append("You see only grass, sand and paths.")
        lines.append(self._facing())
        inventory = player.inventory
        lines.append("Status: " + ", ".join(f"{k} {inventory[k]}/9" for k in VITALS))
        items = [f"{k} {v}" for k, v in inventory.items() if k not in VITALS and v > 0]
        lines.append("Inventory: " + (", ".join(items) if items else "empty"))
        return "\n".join(lines)

    def _nearest_cells(self) -> dict[str, tuple[int, int]]:
        """Offset of the nearest cell of each kind in view, nearest kinds first (ties: north, then west)."""
        world, (px, py) = self._env._world, self._env._player.pos
        nearest: dict[str, tuple[int, int]] = {}
        offsets = sorted(
            ((dx, dy) for dx in range(-_VIEW_HALF_WIDTH, _VIEW_HALF_WIDTH + 1)
             for dy in range(-_VIEW_HALF_HEIGHT, _VIEW_HALF_HEIGHT + 1) if (dx, dy) != (0, 0)),
            key=lambda d: (abs(d[0]) + abs(d[1]), d[1], d[0]),
        )
        for dx, dy in offsets:
            kind = _cell_kind(world, (px + dx, py + dy))
            if kind is not None and kind not in _HIDDEN_CELLS and kind not in nearest:
                nearest[kind] = (dx, dy)
        return nearest

    def _facing(self) -> str:
        player = self._env._player
        fx, fy = (int(c) for c in player.facing)
        direction = {(0, -1): "north", (1, 0): "east", (0, 1): "south", (-1, 0): "west"}[(fx, fy)]
        kind = _cell_kind(self._env._world, (player.pos[0] + fx, player.pos[1] + fy))
        return f"You face {direction}: {kind or 'the edge of the world'} in front of you."


class InsertionOrderedSet(dict):
    """The part of ``set`` Crafter's world uses (add, remove, membership, iteration), iterating in
    insertion order: a dict keeps that order, while a set of objects iterates by memory address."""

    def add(self, item: Any) -> None:
        self[item] = None

    def remove(self, item: Any) -> None:
        del self[item]


def ordered_chunks(world: Any) -> None:
    """Make a fresh Crafter world's chunk -> objects map iterate deterministically.

    Every 10 steps Crafter balances creatures chunk by chunk, listing each chunk's objects from a
    ``set`` and despawning ``creatures[random.randint(n)]``: which cow or zombie goes depends on
    the set's order, i.e. on memory addresses, so the same seed parts between processes (seed 44
    at step 13, seed 1234 at step 26). Rebuilding the map with insertion-ordered sets, members in
    the order the world created them, fixes that order without forking Crafter; later ``add`` and
    ``remove`` calls keep it because they happen in the same order on every replay.
    """
    chunks = collections.defaultdict(InsertionOrderedSet)
    for key, members in world._chunks.items():
        chunks[key] = InsertionOrderedSet.fromkeys(sorted(members, key=lambda obj: int(world._obj_map[tuple(obj.pos)])))
    world._chunks = chunks


def _describe_actions(constants: Any) -> dict[str, str]:
    """One line per action; placing and crafting costs are read from Crafter's rules so they cannot drift."""
    descriptions = {}
    for name in CRAFTER_ACTION_NAMES:
        verb, _, item = name.partition("_")
        if verb == "place":
            rule = constants.place[item]
            descriptions[name] = f"place a {item} on the faced cell (uses {_amounts(rule['uses'])})"
        elif verb == "make":
            rule = constants.make[item]
            near = " and ".join(rule["nearby"])
            article = "an" if item[0] in "aeiou" else "a"
            uses = _amounts(rule["uses"])
            descriptions[name] = f"craft {article} {item.replace('_', ' ')} (uses {uses}; needs a {near} nearby)"
        else:
            descriptions[name] = _BASIC_DESCRIPTIONS[name]
    return descriptions


def _amounts(uses: dict[str, int]) -> str:
    return ", ".join(f"{count} {item}" for item, count in uses.items())


def _cell_kind(world: Any, pos: tuple[int, int]) -> str | None:
    """What a cell shows: its creature or object if any, else its material; None outside the world."""
    material, obj = world[pos]
    if obj is not None:
        return type(obj).__name__.lower()
    return material
