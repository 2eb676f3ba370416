"""Text observations and episode driving shared by the NetHack and MiniHack adapters.

Both games run on the NetHack Learning Environment and differ only in the env they build, the
progression rule and a few presentation choices, so the common work lives here:

* rendering an NLE observation as text (message, nearby things with steps and directions, a
  cropped ASCII map around the player, any menu on screen, inventory and status), written for
  us because ``nle-language-wrapper`` does not install with current NLE;
* ``NLEGame``, the adapter base: exact seeding (``env.reset(seed=...)`` does not seed NetHack,
  ``env.seed(core, disp, reseed=False)`` does), BALROG's automatic "--More--" skipping, the
  step budget and the conversion to ``StepResult``.

NLE hands out the same numpy buffers on every step. Nothing here keeps a reference to them:
each observation is turned into strings and Python numbers before the env steps again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from automem_dagster.games.actions import describe_offset, nle_vocabulary
from automem_dagster.games.base import GameState, ParsedAction, StepResult, world_digest

# blstats indices (nle.nethack.NLE_BL_*), repeated so this module does not import nle.
BL_X, BL_Y, BL_SCORE, BL_HP, BL_HPMAX, BL_DEPTH, BL_GOLD = 0, 1, 9, 10, 11, 12, 13
BL_ENE, BL_ENEMAX, BL_AC, BL_XP, BL_EXP, BL_TIME, BL_HUNGER = 14, 15, 16, 18, 19, 20, 21
BL_DNUM, BL_DLEVEL = 23, 24

HUNGER_STATES = ("Satiated", "Not hungry", "Hungry", "Weak", "Fainting", "Fainted", "Starved")

OBSERVATION_KEYS = ("chars", "blstats", "message", "tty_chars", "inv_letters", "inv_strs", "screen_descriptions")
"""What the renderer reads; adapters must request at least these from the env."""

# Cells too common to be worth a line of "nearby" text (the map shows them); "" is a cell
# NetHack has no description for. Unexplored rock is blank on the map and never listed.
_UNREMARKABLE = frozenset({"", "floor of a room", "dark part of a room", "wall"})

_MORE = "--More--"
_MAX_MORE_PRESSES = 32  # a long message chain is a handful of pages; this only guards a stuck screen

# Commands that only make sense with items; MiniHack shows the inventory only when it has one.
ITEM_COMMANDS = frozenset({
    "apply", "drop", "droptype", "eat", "quaff", "read", "wear", "wield", "puton", "remove", "takeoff",
    "takeoffall", "throw", "fire", "zap", "dip", "rub", "invoke", "engrave", "quiver", "inventory",
})


def decode(buffer: np.ndarray) -> str:
    """A NUL-padded byte buffer as text."""
    return bytes(buffer).split(b"\0", 1)[0].decode("latin-1")


def inventory_lines(letters: np.ndarray, strings: np.ndarray) -> list[str]:
    """Inventory as NetHack prints it: "a - a +0 long sword (weapon in hand)"."""
    return [f"{chr(letter)} - {decode(text)}" for letter, text in zip(letters, strings, strict=True) if letter]


def inventory_counts(lines: list[str]) -> dict[str, int]:
    """Inventory lines as slot-and-item name -> count: "d - 2 uncursed food rations" -> {"d - uncursed food rations": 2}.

    The slot letter stays in the name because NetHack commands ask for it and it keeps two
    stacks of the same item apart.
    """
    counts: dict[str, int] = {}
    for line in lines:
        slot, _, item = line.partition(" - ")
        first, _, rest = item.partition(" ")
        if first.isdigit():
            counts[f"{slot} - {rest}"] = int(first)
        elif first in ("a", "an", "the"):
            counts[f"{slot} - {rest}"] = 1
        else:
            counts[f"{slot} - {item}"] = 1
    return counts


def nearby_things(descriptions: np.ndarray, chars: np.ndarray, player: tuple[int, int], limit: int) -> list[str]:
    """The nearest cell of each kind on the map, nearest first, as "<what> <steps and direction>".

    Kinds come from NLE's screen descriptions (what NetHack's farlook says, so unidentified items
    read as the player sees them). Distances count king moves, as NetHack allows diagonals.
    """
    px, py = player
    rows, cols = np.nonzero(chars != ord(" "))
    cells = sorted(zip(cols.tolist(), rows.tolist(), strict=True),
                   key=lambda c: (max(abs(c[0] - px), abs(c[1] - py)), abs(c[0] - px) + abs(c[1] - py), c[1], c[0]))
    found: dict[str, str] = {}
    for x, y in cells:
        if (x, y) == (px, py):
            continue
        what = decode(descriptions[y, x])
        if what in _UNREMARKABLE or what in found:
            continue
        found[what] = describe_offset(x - px, y - py, diagonal=True)
        if len(found) == limit:
            break
    return [f"{what} {where}" for what, where in found.items()]


def _text(row: np.ndarray) -> str:
    """One screen row as text, right-stripped; NUL cells (never drawn) read as blanks."""
    return bytes(row).decode("latin-1").replace("\0", " ").rstrip()


def crop_map(chars: np.ndarray, player: tuple[int, int], width: int, height: int) -> str:
    """The map rows and columns around the player, blank rows and the common blank margin removed."""
    rows, cols = chars.shape
    px, py = player
    left = min(max(px - width // 2, 0), max(cols - width, 0))
    top = min(max(py - height // 2, 0), max(rows - height, 0))
    window = [_text(row[left:left + width]) for row in chars[top:top + height]]
    window = [line for line in window if line]
    margin = min((len(line) - len(line.lstrip(" ")) for line in window), default=0)
    return "\n".join(line[margin:] for line in window)


def screen_overlay(tty_chars: np.ndarray, chars: np.ndarray) -> str:
    """Text of a menu or window drawn over the map (e.g. the inventory after "i"), or "" if none.

    Outside menus the terminal's map rows equal the ``chars`` map exactly, so any difference is a
    window; its text is the screen from the leftmost differing column down to the last differing row.
    """
    rows, cols = chars.shape
    differs = tty_chars[1:rows + 1, :cols] != chars
    if not differs.any():
        return ""
    diff_rows, diff_cols = np.nonzero(differs)
    left, bottom = int(diff_cols.min()), int(diff_rows.max()) + 1
    lines = [_text(row[left:]) for row in tty_chars[: bottom + 1]]
    return "\n".join(line for line in lines if line)


def bottom_lines(tty_chars: np.ndarray) -> str:
    """NetHack's two status lines (name, attributes; level, gold, HP, turn...)."""
    return "\n".join(_text(row) for row in tty_chars[-2:])


def compact_status(blstats: np.ndarray) -> str:
    """The vitals a MiniHack task needs on one line, built from blstats."""
    hunger = int(blstats[BL_HUNGER])
    text = (
        f"HP {blstats[BL_HP]}/{blstats[BL_HPMAX]}, Pw {blstats[BL_ENE]}/{blstats[BL_ENEMAX]}, "
        f"AC {blstats[BL_AC]}, XL {blstats[BL_XP]}, Dlvl {blstats[BL_DEPTH]}, T {blstats[BL_TIME]}"
    )
    if hunger != 1 and 0 <= hunger < len(HUNGER_STATES):
        text += f", {HUNGER_STATES[hunger]}"
    return text


def game_state(obs: dict[str, np.ndarray]) -> GameState:
    """Position, inventory, vitals and level numbers of an NLE observation, as Python values."""
    bl = [int(v) for v in obs["blstats"]]
    vitals = {
        "hp": bl[BL_HP], "hp_max": bl[BL_HPMAX], "energy": bl[BL_ENE], "energy_max": bl[BL_ENEMAX],
        "armor_class": bl[BL_AC], "hunger_state": bl[BL_HUNGER], "gold": bl[BL_GOLD],
    }
    level = {"depth": bl[BL_DEPTH], "dungeon_number": bl[BL_DNUM], "dungeon_level": bl[BL_DLEVEL],
             "xp_level": bl[BL_XP], "experience_points": bl[BL_EXP]}
    return GameState(
        position=(bl[BL_X], bl[BL_Y]),
        inventory=inventory_counts(inventory_lines(obs["inv_letters"], obs["inv_strs"])),
        vitals={k: float(v) for k, v in vitals.items()},
        level=level,
    )


@dataclass(frozen=True)
class TextStyle:
    """How much of the screen an adapter puts in its observation text.

    The map window and the number of nearby things bound the length; ``full_status`` shows
    NetHack's own two status lines instead of a compact line; ``show_inventory`` can be turned
    off for tasks whose actions cannot use items.
    """

    map_width: int
    map_height: int
    nearby_limit: int
    full_status: bool
    show_inventory: bool


def render(obs: dict[str, np.ndarray], message: str, style: TextStyle) -> str:
    """The observation text: message, nearby things, map, any menu, inventory, status."""
    bl = obs["blstats"]
    player = (int(bl[BL_X]), int(bl[BL_Y]))
    parts = [f"Message: {message or '(none)'}"]
    things = nearby_things(obs["screen_descriptions"], obs["chars"], player, style.nearby_limit)
    parts.append("Nearby:\n" + "\n".join(f"- {t}" for t in things) if things else "Nearby: nothing notable")
    parts.append(f"Map (you are @ at x={player[0]}, y={player[1]}; north is up):\n"
                 + crop_map(obs["chars"], player, style.map_width, style.map_height))
    overlay = screen_overlay(obs["tty_chars"], obs["chars"])
    if overlay:
        parts.append("On screen (a menu or prompt is open; esc closes it):\n" + overlay)
    if style.show_inventory:
        lines = inventory_lines(obs["inv_letters"], obs["inv_strs"])
        parts.append("Inventory:\n" + ("\n".join(lines) if lines else "(empty)"))
    status = bottom_lines(obs["tty_chars"]) if style.full_status else compact_status(bl)
    parts.append("Status:\n" + status)
    return "\n".join(parts)


class NLEGame(ABC):
    """Adapter base for games on an NLE env: seeding, stepping, "--More--" skipping, step budget.

    Subclasses build the env and say what progression means (``_progress``) and whether an
    episode ends for a game-specific reason (``_extra_end_reason``).
    """

    name: str
    max_steps: int
    default_action: str

    def __init__(self, name: str, env: Any, max_steps: int, default_action: str, style: TextStyle) -> None:
        self.name = name
        self.max_steps = max_steps
        self.default_action = default_action
        self._env = env
        self._style = style
        self._vocabulary, self._action_index = nle_vocabulary(tuple(env.actions), default_action)
        # Envs that leave "--More--" to the agent (NetHack Challenge settings) expose the MORE
        # action; BALROG presses it automatically, so the model never spends a step on it.
        self._more_index = self._action_index.get("more")
        self._steps = 0
        self._done = True
        self._state = GameState(position=None, inventory={}, vitals={})
        self._turn = 0

    def actions(self) -> dict[str, str]:
        return dict(self._vocabulary.descriptions)

    def parse_action(self, text: str) -> ParsedAction:
        return self._vocabulary.parse(text)

    def reset(self, seed: int) -> StepResult:
        self._env.seed(seed, seed, reseed=False)
        obs, _ = self._env.reset()
        self._steps = 0
        self._done = False
        self._start_episode(obs)
        # The whole first screen, map and status as raw bytes: the world beyond the text's crop.
        self._world = tuple(np.ascontiguousarray(obs[key]).tobytes() for key in ("tty_chars", "chars", "blstats"))
        self._first = self._result(obs, decode(obs["message"]), reward=0.0, end_reason=None)
        return self._first

    def world_fingerprint(self) -> str:
        """The first observation and state, and the first screen, map and status line's raw bytes."""
        return world_digest(self._first, *self._world)

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over (or never started): call reset(seed) first")
        if action not in self._action_index:
            raise ValueError(f"unknown action {action!r} for {self.name}; use parse_action() to resolve model text")
        obs, reward, terminated, truncated, info = self._env.step(self._action_index[action])
        rewards = [float(reward)]
        messages = [decode(obs["message"])]
        done = terminated or truncated
        presses = 0
        while not done and self._more_index is not None and _MORE in _screen_text(obs) and presses < _MAX_MORE_PRESSES:
            obs, reward, terminated, truncated, info = self._env.step(self._more_index)
            rewards.append(float(reward))
            messages.append(decode(obs["message"]))
            done = terminated or truncated
            presses += 1
        self._steps += 1
        self._record_step(obs if self._env.nethack.in_normal_game() else None, rewards)
        if done:
            end_reason: str | None = info["end_status"].name.lower()
        else:
            end_reason = self._extra_end_reason()
        if end_reason is None and self._steps >= self.max_steps:
            end_reason = "step_budget"
        self._done = end_reason is not None
        return self._result(obs, _join_messages(messages), reward=sum(rewards), end_reason=end_reason)

    def close(self) -> None:
        """Shut the NetHack process state down and delete the env's temporary files."""
        self._done = True
        self._env.close()

    def __enter__(self) -> NLEGame:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _start_episode(self, obs: dict[str, np.ndarray]) -> None:
        """Reset per-episode trackers from the first observation."""

    @abstractmethod
    def _record_step(self, obs: dict[str, np.ndarray] | None, rewards: list[float]) -> None:
        """Update per-episode trackers after one agent step.

        ``rewards`` holds the reward of each env step (the action and any "--More--" presses);
        ``obs`` is None when the game itself has ended, as NLE's final observation is zeroed.
        """

    @abstractmethod
    def _progress(self) -> float:
        """The episode's progression so far."""

    @abstractmethod
    def _extra_info(self) -> dict[str, Any]:
        """Game-specific, JSON-serialisable facts for ``StepResult.info``."""

    def _extra_end_reason(self) -> str | None:
        """Why the episode ends now for a game-specific reason, or None."""
        return None

    # -----------------------------------------------------------------------------------------

    def _result(self, obs: dict[str, np.ndarray], message: str, reward: float, end_reason: str | None) -> StepResult:
        if self._env.nethack.in_normal_game():
            self._state = game_state(obs)
            self._turn = int(obs["blstats"][BL_TIME])
            text = render(obs, message, self._style)
        else:
            # After the game ends NLE zeroes the status and map; report the end and keep the last
            # in-game state and turn rather than zeros.
            text = f"Message: {message or '(none)'}\nThe game is over ({end_reason})."
        info: dict[str, Any] = {"step": self._steps, "turn": self._turn, **self._extra_info()}
        if end_reason is not None:
            info["end_reason"] = end_reason
        return StepResult(
            observation=text,
            reward=reward,
            done=end_reason is not None,
            progression=self._progress(),
            state=self._state,
            info=info,
        )


def _screen_text(obs: dict[str, np.ndarray]) -> str:
    return bytes(obs["tty_chars"]).decode("latin-1")


def _join_messages(messages: list[str]) -> str:
    """Messages shown across "--More--" pages, in order, each once."""
    kept: list[str] = []
    for message in messages:
        message = message.strip()
        if message and message not in kept:
            kept.append(message)
    return " ".join(kept)
