"""TextWorld as a game, with games generated locally from the seed and BALROG's settings and progression.

BALROG plays pre-made games from the TextWorld hub, which cannot be fetched here; this plugin
generates each episode's game from its seed with the ``textworld`` package's own challenge
generator and compiles it once (a few seconds) into a cache, keyed by task, seed and the package
version. BALROG's Coin Collector is 40 rooms with distractor rooms and a 20-step optimal path
(TextWorld level 120) with the solution taken out of the objective; an episode allows 80 steps,
an unrecognised command is answered by the game itself, the default action is "help", and the
observation is the game's text after the objective. Progression is BALROG's rule at the end of
an episode, max(score / max score, 1 if won), reported at every step so an episode cut short by
the runner's budget scores what it would have at that step.

Only Coin Collector is offered: its commands are the same for every seed (moves, "take coin",
look, inventory, help), and the action vocabulary is fixed before a game is reset. Tasks whose
objects change with the seed (Treasure Hunter, the Cooking Game) need a per-episode vocabulary.
It uses only the public contract (``games.base``, ``games.actions``).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from automem_dagster.games.actions import ActionVocabulary, VocabularyGame, compass_aliases
from automem_dagster.games.base import GameState, StepResult, world_digest

TEXTWORLD_TASKS = {"coin_collector": {"level": 120, "objective": "Find the coin and take it."}}
"""Task -> the generator's settings (BALROG's difficulty) and the objective shown instead of the solution."""

TEXTWORLD_ACTIONS = {
    **{f"go_{d}": f"walk through the exit to the {d}" for d in ("north", "south", "east", "west")},
    "take_coin": "pick up the coin when it is in the room",
    "look": "describe the room you are in again",
    "inventory": "list what you carry",
    "help": "list the commands the game understands",
}

"""Names as the vocabulary spells them; the command sent to the game has spaces ("go north")."""

_MOVES = {d: f"go_{d}" for d in ("north", "south", "east", "west")}
TEXTWORLD_ALIASES: dict[str, tuple[str, ...]] = {
    **compass_aliases(_MOVES),
    **{word: ("take_coin",) for word in ("get_coin", "pick_up_coin", "grab_coin", "take_the_coin", "take")},
    "inv": ("inventory",), "look_around": ("look",), "goal": ("help",),
}

_ROOM = re.compile(r"-= (.+?) =-")
"""TextWorld heads a room's description with its name: "-= Laundromat =-"."""


def default_cache() -> Path:
    """Where compiled games are kept: ``$AUTOMEM_TEXTWORLD_CACHE``, else a folder in the system's temp
    directory; any folder works, and a lost game is generated again."""
    return Path(os.environ.get("AUTOMEM_TEXTWORLD_CACHE") or Path(tempfile.gettempdir()) / "automem-textworld")


class TextWorldGame(VocabularyGame):
    """One TextWorld task, e.g. ``TextWorldGame("coin_collector")``; each seed is its own generated game."""

    default_action = "help"
    packages = ("textworld", "jericho")

    def __init__(self, task: str, max_steps: int | None = None, cache: Path | None = None) -> None:
        try:
            import textworld  # noqa: F401  (checked here so a missing extra is named before any episode)
        except ImportError as exc:
            raise ValueError("textworld games need the textworld package: pip install 'automem-dagster[textworld]' "
                             f"(it builds jericho with make and a C compiler): {exc}") from exc
        if task not in TEXTWORLD_TASKS:
            raise ValueError(f"unknown game 'textworld:{task}': use one of "
                             f"{', '.join('textworld:' + t for t in TEXTWORLD_TASKS)}")
        self.name = f"textworld:{task}"
        self.task = task
        self.max_steps = max_steps or 80
        self._cache = Path(cache) if cache is not None else default_cache()
        self._vocabulary = ActionVocabulary(dict(TEXTWORLD_ACTIONS), self.default_action, TEXTWORLD_ALIASES)
        self._env: Any = None
        self._first: StepResult | None = None
        self._world = b""
        self._done = True

    def reset(self, seed: int) -> StepResult:
        import textworld

        self.close()
        path = self._compiled(seed)
        self._world = path.with_suffix(".json").read_bytes()
        infos = textworld.EnvInfos(objective=True, description=True, score=True, max_score=True, won=True,
                                   lost=True)
        self._env = textworld.start(str(path), infos)
        state = self._env.reset()
        self._objective = str(state["objective"])
        self._steps, self._done, self._rooms, self._room = 0, False, [], 0
        self._first = self._result(state, 0.0)
        return self._first

    def world_fingerprint(self) -> str:
        """The first observation and state, and the generated game's description (rooms, objects, quest)."""
        if self._first is None:
            raise RuntimeError("no world yet: call reset(seed) first")
        return world_digest(self._first, self._world)

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over (or never started): call reset(seed) first")
        if action not in TEXTWORLD_ACTIONS:
            raise ValueError(f"unknown TextWorld action {action!r}; use parse_action() to resolve model text")
        state, reward, done = self._env.step(action.replace("_", " "))
        self._steps += 1
        self._done = bool(done) or self._steps >= self.max_steps
        return self._result(state, float(reward))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env = None
        self._done = True

    def _result(self, state: Any, reward: float) -> StepResult:
        score, max_score, won = int(state["score"]), int(state["max_score"]), bool(state["won"])
        progression = max(score / max_score if max_score else 0.0, 1.0 if won else 0.0)
        info: dict[str, Any] = {"step": self._steps, "score": score, "max_score": max_score, "won": won}
        if self._done:
            info["end_reason"] = "won" if won else ("lost" if state["lost"] else "step_budget")
        room = _ROOM.search(str(state.feedback))
        if room and room.group(1) not in self._rooms:
            self._rooms.append(room.group(1))
        self._room = self._rooms.index(room.group(1)) if room else self._room
        # The room counts as progress for the stuck signal (games.base: position, inventory, level).
        game_state = GameState(position=None, inventory={}, vitals={},
                               level={"score": score, "max_score": max_score, "room": self._room})
        return StepResult(observation=self._text(str(state.feedback)), reward=reward,
                          done=self._done, progression=progression, state=game_state, info=info)

    def _text(self, feedback: str) -> str:
        """BALROG's rule: only the text after the objective (the banner and the goal go); the prompt and
        status line TextWorld prints after it are dropped too."""
        text = feedback.split(self._objective)[-1] if self._objective else feedback
        text = text.rsplit("\n>", 1)[0] if "\n>" in text else text
        lines = [line.rstrip() for line in text.strip().splitlines()]
        body = "\n".join(line for i, line in enumerate(lines) if line or (i and lines[i - 1]))
        return body or "(the game printed nothing)"

    def _compiled(self, seed: int) -> Path:
        """The compiled game of ``seed`` (``.z8``, with its ``.json`` beside it), generated on first use."""
        version = metadata.version("textworld")
        key = hashlib.sha256(f"{self.task}:{seed}:{version}".encode()).hexdigest()[:12]
        path = self._cache / self.task / f"seed{seed}-{key}.z8"
        if path.is_file() and path.with_suffix(".json").is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as work:
            built = generate(self.task, seed, Path(work))
            os.replace(built.with_suffix(".json"), path.with_suffix(".json"))
            os.replace(built, path)
        return path


def generate(task: str, seed: int, folder: Path) -> Path:
    """Generate and compile the game of ``task`` for ``seed`` in ``folder``; returns the ``.z8`` path."""
    import textworld
    from textworld.challenges.tw_coin_collector import coin_collector

    settings = TEXTWORLD_TASKS[task]
    options = textworld.GameOptions()
    options.seeds = seed
    options.path = str(folder / "game.z8")
    options.file_ext = ".z8"
    game = coin_collector.make({"level": settings["level"]}, options)
    game.objective = settings["objective"]
    return Path(textworld.generator.compile_game(game, options))
