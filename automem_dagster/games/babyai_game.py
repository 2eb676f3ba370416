"""BabyAI (the ``minigrid`` package's levels) as a text game, with BALROG's actions, text and progression.

BALROG plays BabyAI-Text: six actions named in words ("turn left", "go forward", ...; minigrid's
seventh, "done", is not offered), "go forward" as the default action, the level's own step limit,
and an observation that lists what the agent sees in its 7x7 egocentric view as "a <thing>
<where>" lines, where is counted in steps left/right and forward, plus what it carries. An
episode's progression is 1.0 once a step pays a positive reward (the mission is done), else 0.

BabyAI-Text's own mixed level (``BabyAI-MixedTrainLocal-v0``) ships with its authors' package,
not with minigrid; this plugin plays minigrid's single-instruction levels ("babyai:GoToLocal" is
``BabyAI-GoToLocal-v0``), whose missions are the same kinds (go to, pick up, open, put next to).
It uses only the public contract (``games.base``, ``games.actions``).
"""

from __future__ import annotations

from typing import Any

from automem_dagster.games.actions import ActionVocabulary, VocabularyGame
from automem_dagster.games.base import GameState, StepResult, world_digest

BABYAI_ACTIONS = {
    "turn_left": "turn 90 degrees to your left",
    "turn_right": "turn 90 degrees to your right",
    "go_forward": "move one cell forward",
    "pick_up": "pick up the object right in front of you",
    "drop": "drop what you carry on the cell in front of you",
    "toggle": "open, close or unlock the door (or open the box) in front of you",
}
"""Minigrid's action indices 0..5, in order; BALROG writes the names with spaces ("turn left")."""

BABYAI_ALIASES: dict[str, tuple[str, ...]] = {
    "left": ("turn_left",), "right": ("turn_right",), "turn_around": ("turn_left",),
    **{word: ("go_forward",) for word in ("forward", "move_forward", "go", "move", "step_forward", "walk_forward")},
    **{word: ("pick_up",) for word in ("pickup", "pick", "take", "grab", "pick_up_object")},
    **{word: ("toggle",) for word in ("open", "open_door", "unlock", "use", "close")},
    "put_down": ("drop",),
}

_VIEW = 7
_AGENT_X, _AGENT_Y = _VIEW // 2, _VIEW - 1  # where the agent stands in its own view, facing "up"
_SEEN = ("key", "ball", "box", "door", "goal", "lava")
_DOOR_STATES = {0: "open", 1: "closed", 2: "locked"}


class BabyAIGame(VocabularyGame):
    """One BabyAI level, e.g. ``BabyAIGame("GoToLocal")`` for ``BabyAI-GoToLocal-v0``."""

    default_action = "go_forward"
    packages = ("minigrid", "gymnasium", "numpy")

    def __init__(self, task: str, max_steps: int | None = None) -> None:
        import gymnasium as gym
        import minigrid  # noqa: F401  (importing it registers the BabyAI ids)

        env_id = task if task.startswith("BabyAI-") else f"BabyAI-{task}-v0"
        if env_id not in gym.registry:
            raise ValueError(f"unknown game 'babyai:{task}': {env_id} is not a minigrid BabyAI level; "
                             "use e.g. babyai:GoToLocal, babyai:PickupLoc, babyai:PutNextLocal")
        self._env: Any = gym.make(env_id, disable_env_checker=True).unwrapped
        self.name = f"babyai:{task}"
        if max_steps is None:  # a level sets its limit when it builds a mission, so build one to read it
            self._env.reset(seed=0)
        self.max_steps = max_steps or int(self._env.max_steps)
        self._vocabulary = ActionVocabulary(dict(BABYAI_ACTIONS), self.default_action, BABYAI_ALIASES)
        self._index = {name: index for index, name in enumerate(BABYAI_ACTIONS)}
        self._first: StepResult | None = None
        self._steps = 0
        self._solved = False
        self._done = True

    def reset(self, seed: int) -> StepResult:
        obs, _ = self._env.reset(seed=seed)
        self._mission = str(obs["mission"])
        self._steps, self._solved, self._done = 0, False, False
        self._first = self._result(obs, 0.0, False)
        return self._first

    def world_fingerprint(self) -> str:
        """The first observation and state, the whole grid's encoding and the mission."""
        if self._first is None:
            raise RuntimeError("no world yet: call reset(seed) first")
        return world_digest(self._first, self._env.grid.encode().tobytes(), self._mission.encode())

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("the episode is over (or never started): call reset(seed) first")
        if action not in self._index:
            raise ValueError(f"unknown BabyAI action {action!r}; use parse_action() to resolve model text")
        obs, reward, terminated, truncated, _ = self._env.step(self._index[action])
        self._steps += 1
        self._solved = self._solved or reward > 0
        self._done = bool(terminated or truncated) or self._steps >= self.max_steps
        return self._result(obs, float(reward), self._done)

    def close(self) -> None:
        self._done = True
        self._env.close()

    def _result(self, obs: dict, reward: float, done: bool) -> StepResult:
        info: dict[str, Any] = {"step": self._steps, "mission": self._mission, "solved": self._solved}
        if done:
            info["end_reason"] = "solved" if self._solved else "step_budget"
        carrying = self._env.carrying
        x, y = (int(c) for c in self._env.agent_pos)
        state = GameState(position=(x, y), inventory={_thing(carrying): 1} if carrying else {}, vitals={},
                          level={"facing": int(self._env.agent_dir)})
        return StepResult(observation=describe_view(obs["image"], self._mission, carrying), reward=reward, done=done,
                          progression=1.0 if self._solved else 0.0, state=state, info=info)


def describe_view(image: Any, mission: str, carrying: Any) -> str:
    """The BabyAI-Text rendering of one egocentric view: the mission, then one line per thing seen.

    Walls are given only straight ahead, left and right (the nearest one each way); objects,
    doors, goals and lava with their offset, nearest first.
    """
    from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

    lines = [f"Mission: {mission}"]
    for dx, dy in ((0, -1), (-1, 0), (1, 0)):
        steps = _wall_distance(image, IDX_TO_OBJECT, dx, dy)
        if steps is not None:
            lines.append(f"a wall {_count(steps)} {_WAY[(dx, dy)]}")
    things = []
    for x in range(_VIEW):
        for y in range(_VIEW):
            kind, color, state = (int(v) for v in image[x][y])
            name = IDX_TO_OBJECT[kind]
            if name in _SEEN and (x, y) != (_AGENT_X, _AGENT_Y):
                what = f"{_DOOR_STATES[state]} {IDX_TO_COLOR[color]} door" if name == "door" else (
                    name if name in ("goal", "lava") else f"{IDX_TO_COLOR[color]} {name}")
                things.append((abs(x - _AGENT_X) + (_AGENT_Y - y), f"a {what} {_offset(x - _AGENT_X, _AGENT_Y - y)}"))
    lines += [text for _, text in sorted(things)]
    if carrying is not None:
        lines.append(f"You carry a {_thing(carrying)}")
    return "\n".join(lines)


_WAY = {(0, -1): "forward", (-1, 0): "left", (1, 0): "right"}


def _wall_distance(image: Any, names: dict, dx: int, dy: int) -> int | None:
    x, y, steps = _AGENT_X + dx, _AGENT_Y + dy, 1
    while 0 <= x < _VIEW and 0 <= y < _VIEW:
        name = names[int(image[x][y][0])]
        if name == "wall":
            return steps
        if name != "empty":
            return None
        x, y, steps = x + dx, y + dy, steps + 1
    return None


def _offset(right: int, forward: int) -> str:
    parts = []
    if right:
        parts.append(f"{_count(abs(right))} {'right' if right > 0 else 'left'}")
    if forward:
        parts.append(f"{_count(forward)} forward")
    return " and ".join(parts) if parts else "right here"


def _count(steps: int) -> str:
    return f"{steps} step" if steps == 1 else f"{steps} steps"


def _thing(obj: Any) -> str:
    return f"{obj.color} {obj.type}"
