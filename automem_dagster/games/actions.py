"""Action vocabularies and tolerant parsing of model text into action names.

Small models rarely answer with the exact action name: they vary case, add quotes or a
trailing full stop, write "move north" for "move_north", or use a synonym ("up", "attack").
Resolving these here, once for every game, keeps the agent code free of per-game string
handling and makes the invalid-action rate a property of the model rather than of our parser.
Anything still unresolved falls back to the game's default action with the feedback note
BALROG shows after an invalid action.

The NetHack action names and descriptions also live here (not in the NLE adapters) because
they are pure vocabulary: importing this module never imports ``nle``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from automem_dagster.games.base import ParsedAction

COMPASS = ("north", "east", "south", "west", "northeast", "southeast", "southwest", "northwest")

_ENUM_COMPASS = dict(zip(("N", "E", "S", "W", "NE", "SE", "SW", "NW"), COMPASS, strict=True))

# Words a model uses for a direction, mapped to the compass name; game vocabularies turn these
# into their own action names ("north" -> "move_north" in Crafter, "north" in NetHack).
DIRECTION_SYNONYMS: dict[str, str] = {
    "up": "north",
    "down": "south",
    "left": "west",
    "right": "east",
    "upward": "north",
    "downward": "south",
    "ne": "northeast",
    "se": "southeast",
    "sw": "southwest",
    "nw": "northwest",
    "up_right": "northeast",
    "up_left": "northwest",
    "down_right": "southeast",
    "down_left": "southwest",
}

MOVE_PREFIXES = ("move", "go", "walk", "step", "head")

# Characters a model wraps an answer in: quotes, markdown emphasis, brackets, final punctuation.
_WRAPPING = " \t\r\n\"'`*_[](){}<>.,;:!?"
_QUOTES = " \t\r\n\"'`"


def normalize(text: str) -> str:
    """Lower-case ``text``, drop wrapping quotes/brackets/punctuation and join words with underscores.

    "  'Move North.' " and "move-north" both become "move_north"; "far north east" becomes
    "far_northeast" so compound compass words match the single-word compass names.
    """
    text = text.strip(_WRAPPING).lower()
    text = re.sub(r"[\s\-_/]+", "_", text)
    return re.sub(r"(north|south)_(east|west)", r"\1\2", text)


def describe_offset(dx: int, dy: int, *, diagonal: bool) -> str:
    """Say where a cell at (dx, dy) from the player lies, in steps a model can act on.

    ``dy`` grows southwards (screen coordinates). With ``diagonal`` moves allowed (NetHack) an
    exact diagonal is one direction ("2 steps to your northeast"); otherwise the vertical and
    horizontal legs are spelled out ("2 steps north and 1 step west", Crafter's 4-way moves).
    """
    vertical = "north" if dy < 0 else "south"
    horizontal = "west" if dx < 0 else "east"
    ady, adx = abs(dy), abs(dx)
    if adx == 0 and ady == 0:
        return "under you"
    if adx == 0 or ady == 0:
        steps, where = (ady, vertical) if adx == 0 else (adx, horizontal)
        return f"{_steps(steps)} to your {where}"
    if diagonal and adx == ady:
        return f"{_steps(adx)} to your {vertical}{horizontal}"
    return f"{_steps(ady)} {vertical} and {_steps(adx)} {horizontal}"


def _steps(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"


@dataclass(frozen=True)
class ActionVocabulary:
    """The action names of one game plus everything needed to map model text onto them.

    ``aliases`` maps a normalized alias to candidate action names, tried in order; the first
    candidate the game actually has wins, so one alias table serves games whose action sets
    differ (e.g. "wait" is NetHack's wait but MiniHack Corridor's search). ``keys`` maps a
    single typed character to an action, NetHack style ("k" is north, "d" answers a prompt).
    """

    descriptions: dict[str, str]
    default: str
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default not in self.descriptions:
            raise ValueError(f"default action {self.default!r} is not one of the game's actions")

    def parse(self, text: str) -> ParsedAction:
        """Resolve ``text``; an unresolvable text yields the default action with a feedback note."""
        action = self._resolve(text)
        if action is None and ":" in text:
            # "Action: north" / "Final answer: do": the answer follows the last label.
            action = self._resolve(text.rsplit(":", 1)[1])
        if action is not None:
            return ParsedAction(action, True)
        shown = " ".join(text.split())
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        note = (
            f"Your previous output ({shown!r}) held no valid action, "
            f"so the default action {self.default!r} was used."
        )
        return ParsedAction(self.default, False, note)

    def _resolve(self, text: str) -> str | None:
        bare = text.strip(_QUOTES)
        if len(bare) == 1 and bare in self.keys:
            return self.keys[bare]
        name = normalize(text)
        if name in self.descriptions:
            return name
        return next((c for c in self.aliases.get(name, ()) if c in self.descriptions), None)


class VocabularyGame:
    """What every text game writes the same way: its actions and their parsing come from its
    ``ActionVocabulary`` (``self._vocabulary``), and ``with game:`` closes it."""

    _vocabulary: ActionVocabulary

    def actions(self) -> dict[str, str]:
        return dict(self._vocabulary.descriptions)

    def parse_action(self, text: str) -> ParsedAction:
        return self._vocabulary.parse(text)

    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compass_aliases(target: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Aliases for moving one step: every direction word and "move/go/walk ... <dir>" form.

    ``target`` maps compass names to the game's action names for them (only the directions the
    game can move in); exact action names always win over aliases, so an alias never hides an
    action (NetHack's "up" stays "climb the stairs", it is "north" only where there is no "up").
    """
    aliases: dict[str, tuple[str, ...]] = {}
    words = {direction: [direction] for direction in target}
    for synonym, direction in DIRECTION_SYNONYMS.items():
        if direction in words:
            words[direction].append(synonym)
    for direction, spellings in words.items():
        for word in spellings:
            aliases.setdefault(word, (target[direction],))
            for prefix in MOVE_PREFIXES:
                aliases.setdefault(f"{prefix}_{word}", (target[direction],))
    return aliases


# ---------------------------------------------------------------------------------------------
# NetHack / MiniHack vocabulary
# ---------------------------------------------------------------------------------------------

NLE_DESCRIPTIONS: dict[str, str] = {
    **{d: f"move one step {d}; attacks a monster standing there" for d in COMPASS},
    **{f"far_{d}": f"run {d} until something interesting is seen" for d in COMPASS},
    "up": "climb up a staircase (only while standing on <)",
    "down": "go down a staircase (only while standing on >)",
    "wait": "rest one turn doing nothing",
    "more": "show the next part of a message (when it ends with --More--)",
    "extcmd": "start an extended command (#...)",
    "extlist": "list all extended commands",
    "adjust": "adjust inventory letters",
    "annotate": "name the current level",
    "apply": "apply (use) a tool such as a pick-axe, key or lamp",
    "attributes": "show your attributes",
    "autopickup": "toggle automatic pickup on or off",
    "call": "call (name) a monster or object type",
    "cast": "cast a known spell",
    "chat": "talk to someone nearby",
    "close": "close an adjacent door",
    "conduct": "list the voluntary challenges kept so far",
    "dip": "dip an object into something",
    "drop": "drop an item",
    "droptype": "drop several items by type",
    "eat": "eat something (when hungry)",
    "engrave": "engrave on the floor (e.g. Elbereth scares most monsters)",
    "enhance": "advance or check weapon and spell skills",
    "esc": "escape: cancel the current prompt or close a menu",
    "fight": "fight in a direction even if no monster is seen there",
    "fire": "fire ammunition from the quiver",
    "force": "force a lock with a weapon",
    "glance": "identify what a map symbol is",
    "history": "show the game's version and history",
    "inventory": "show your inventory",
    "inventtype": "show inventory items of one type",
    "invoke": "invoke an object's special power",
    "jump": "jump to another location",
    "kick": "kick something (a locked door, a box or a monster)",
    "known": "list the object types discovered so far",
    "knownclass": "list discovered object types of one class",
    "look": "look at what is here on the floor",
    "loot": "loot a box or bag on the floor",
    "monster": "use a special ability of your current monster form",
    "move": "prefix: move without picking up objects or fighting",
    "movefar": "prefix: run without picking up objects or fighting",
    "offer": "offer a sacrifice on an altar",
    "open": "open an adjacent door",
    "options": "show or change game options",
    "overview": "summarize the dungeon explored so far",
    "pay": "pay a shopkeeper",
    "pickup": "pick up what is on the floor here",
    "pray": "pray to your god for help (when in trouble)",
    "puton": "put on an accessory (ring, amulet, blindfold)",
    "quaff": "quaff (drink) a potion or from a fountain",
    "quit": "quit the game for good",
    "quiver": "choose ammunition for the quiver",
    "read": "read a scroll or spellbook",
    "redraw": "redraw the screen",
    "remove": "remove an accessory",
    "ride": "mount or dismount a saddled steed",
    "rub": "rub a lamp or a stone",
    "rush": "prefix: rush in a direction until something interesting is seen",
    "rush2": "prefix: rush in a direction, stopping at fewer things",
    "save": "save the game and stop",
    "search": "search adjacent squares for hidden doors, passages and traps",
    "seeall": "show all equipment in use",
    "seeamulet": "show the amulet worn",
    "seearmor": "show the armor worn",
    "seegold": "count your gold",
    "seerings": "show the rings worn",
    "seespells": "list known spells",
    "seetools": "show the tools in use",
    "seetrap": "show the type of an adjacent trap",
    "seeweapon": "show the wielded weapon",
    "shell": "shell escape (disabled in this build)",
    "sit": "sit down",
    "swap": "swap the wielded and the secondary weapon",
    "takeoff": "take off one piece of armor",
    "takeoffall": "take off all armor",
    "teleport": "teleport within the level (if you can)",
    "throw": "throw an object",
    "tip": "empty a container onto the floor",
    "travel": "travel to a chosen map location",
    "turn": "turn undead (priests and knights)",
    "twoweapon": "toggle fighting with two weapons",
    "untrap": "disarm a trap",
    "version": "show the compile-time options",
    "versionshort": "show the game version",
    "wear": "wear a piece of armor",
    "whatdoes": "tell what a key does",
    "whatis": "tell what a map symbol means",
    "wield": "wield a weapon",
    "wipe": "wipe off your face",
    "zap": "zap a wand",
    "plus": "type '+' (answer a prompt)",
    "minus": "type '-' (answer a prompt, e.g. bare hands)",
    "space": "type a space (dismiss a message or page a menu)",
    "apos": "type an apostrophe (answer a prompt)",
    "quote": "type '\"' (answer a prompt)",
    "dollar": "type '$' (answer a prompt, e.g. gold)",
    **{f"num_{n}": f"type the digit {n} (a count or a menu choice)" for n in range(10)},
}

NLE_ALIASES: dict[str, tuple[str, ...]] = {
    **compass_aliases({d: d for d in COMPASS}),
    **{f"{prefix}_{d}": (f"far_{d}",) for d in COMPASS for prefix in ("run", "rush", "move_far", "go_far")},
    "upstairs": ("up",),
    "go_upstairs": ("up",),
    "climb": ("up",),
    "ascend": ("up",),
    "stairs_up": ("up",),
    "downstairs": ("down",),
    "go_downstairs": ("down",),
    "descend": ("down",),
    "stairs_down": ("down",),
    "rest": ("wait", "search"),
    "noop": ("wait", "search"),
    "no_op": ("wait", "search"),
    "idle": ("wait", "search"),
    "stay": ("wait", "search"),
    "wait": ("wait", "search"),
    "pick_up": ("pickup",),
    "pick": ("pickup",),
    "grab": ("pickup",),
    "take": ("pickup",),
    "escape": ("esc",),
    "cancel": ("esc",),
    "exit": ("esc",),
    "enter": ("more",),
    "return": ("more",),
    "continue": ("more",),
    "next": ("more",),
    "attack": ("fight",),
    "inv": ("inventory",),
    "show_inventory": ("inventory",),
    "drink": ("quaff",),
    "open_door": ("open",),
    "close_door": ("close",),
    "kick_door": ("kick",),
}


def nle_action_name(action: Any) -> str:
    """The vocabulary name of an ``nle.nethack.actions`` enum member.

    Compass members become "north" ... "northwest" (their enum names are N ... NW), the
    "Longer" compass enums "far_north" ...; every other member is its enum name lower-cased.
    """
    enum_class = type(action).__name__
    if enum_class.startswith("Compass"):
        direction = _ENUM_COMPASS[action.name]
        return f"far_{direction}" if enum_class.endswith("Longer") else direction
    return action.name.lower()


def nle_vocabulary(env_actions: tuple[Any, ...], default: str) -> tuple[ActionVocabulary, dict[str, int]]:
    """Vocabulary for an NLE env's action tuple plus the name -> action-index map to step it.

    Descriptions carry the typed key where it is printable ("eat something [key e]") because
    NetHack prompts ask for keys ("What do you want to eat? [d or ?*]") and a single typed
    character parses to the action bound to that key.
    """
    descriptions: dict[str, str] = {}
    indices: dict[str, int] = {}
    keys: dict[str, str] = {}
    for index, action in enumerate(env_actions):
        name = nle_action_name(action)
        if name in indices:
            raise ValueError(f"two actions of this env are both named {name!r}")
        char = chr(int(action))
        text = NLE_DESCRIPTIONS.get(name, f"press the key for {action.name.lower()}")
        if char.isprintable():
            text = f"{text} [key {char}]"
            keys.setdefault(char, name)
        descriptions[name] = text
        indices[name] = index
    return ActionVocabulary(descriptions, default, NLE_ALIASES, keys), indices
