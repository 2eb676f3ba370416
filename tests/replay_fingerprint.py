"""Fingerprints of seeded random-policy plays, printed as JSON: run in fresh processes to compare.

Run as ``python tests/replay_fingerprint.py GAME STEPS SEED...``. Each seed is played for
STEPS steps with actions drawn by ``random.Random(seed)`` from the game's vocabulary; the
fingerprint hashes every observation, reward, progression, state and done flag, and the first
step of each seed's trajectory is kept so a mismatch can say where two processes parted.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys

from automem_dagster.games import make_game
from automem_dagster.games.base import state_record


def fingerprint(game_name: str, seed: int, steps: int) -> dict:
    """Hash of the whole play plus one hash per step (to find where two plays part)."""
    rng = random.Random(seed)
    game = make_game(game_name, max_steps=steps)
    names = list(game.actions())
    per_step = []
    try:
        result = game.reset(seed)
        for _ in range(steps + 1):
            record = [result.observation, result.reward, result.progression, result.done, state_record(result.state)]
            per_step.append(hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12])
            if result.done:
                break
            result = game.step(rng.choice(names))
    finally:
        game.close()
    return {"all": hashlib.sha256("".join(per_step).encode()).hexdigest(), "steps": per_step}


def main(argv: list[str]) -> None:
    game_name, steps, seeds = argv[0], int(argv[1]), [int(s) for s in argv[2:]]
    print(json.dumps({str(seed): fingerprint(game_name, seed, steps) for seed in seeds}))


if __name__ == "__main__":
    main(sys.argv[1:])
