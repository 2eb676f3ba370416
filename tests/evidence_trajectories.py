"""Hand-written trajectories, as ``read_trajectory`` accepts them, with known answers: turns with
chosen token counts, steps at chosen positions, and a finished episode file."""

import json

import builders


def _turn(phase, tokens, ops=(), errors=(), text=""):
    return builders.turn(phase, text, ops, errors, input_tokens=tokens)


def _step(action, position, turns, valid=True, progression=0.0, observation=None):
    return builders.step(action, turns, valid=valid, progression=progression,
                         observation=observation or f"you stand at {position}",
                         state={"position": list(position), "inventory": {"wood": 1}, "vitals": {}, "level": {"depth": 1}})


def _write(folder, episode, steps, seed=1):
    """A finished trajectory exactly as ``read_trajectory`` accepts it: header, steps 0..n-1, end."""
    lines = [{"type": "header", "episode": episode, "game": "test", "seed": seed}]
    lines += [{"type": "step", "step": i, **record} for i, record in enumerate(steps)]
    lines.append({"type": "end", "steps": len(steps), "progression": steps[-1]["progression"],
                  "total_reward": 0.0, "done": False})
    path = folder / f"{episode}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
