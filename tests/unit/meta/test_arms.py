"""The check that the arms of a pair drew from one seed schedule (``meta/arms.shares_seeds``): the replay
refuses a pair whose arms did not, since their difference would then mix the decision's effect with
sampling noise (issue 51: arms share their sampling seeds, and a check fails when they do not)."""

from automem_dagster.agent.sampling import request_seed
from automem_dagster.meta.arms import Arm, shares_seeds
from automem_dagster.meta.decisions import MemoryDecision, MemoryDecisionScore

DECISION = MemoryDecision("keydoor__seed5", 5, 3, "log", [], [], [], MemoryDecisionScore("progression", 10))


def arm(kind: str, seeds: list[list[int | None]]) -> Arm:
    steps = [{"step": DECISION.step + i, "action": "forward"} for i in range(len(seeds))]
    return Arm(kind, steps, 0.0, 0, seeds)


def schedule(episode_seed: int, step: int, *turns: tuple[str, int]) -> list[int]:
    return [request_seed(episode_seed, step, phase, k) for phase, k in turns]


def test_arms_on_the_episodes_schedule_share_seeds():
    made = arm("made", [schedule(5, 3, ("log", 0), ("plan", 0), ("action", 0)), schedule(5, 4, ("plan", 0))])
    ablated = arm("ablated", [schedule(5, 3, ("log", 0), ("plan", 0)), schedule(5, 4, ("log", 0), ("plan", 1))])
    assert shares_seeds(DECISION, [made, ablated])     # different turns, one schedule


def test_an_arm_on_another_schedule_fails_the_check():
    made = arm("made", [schedule(5, 3, ("log", 0), ("plan", 0))])
    other_episode = arm("ablated", [schedule(6, 3, ("log", 0), ("plan", 0))])
    shifted_step = arm("ablated", [schedule(5, 4, ("log", 0), ("plan", 0))])
    unseeded = arm("ablated", [[None]])
    for wrong in (other_episode, shifted_step, unseeded):
        assert not shares_seeds(DECISION, [made, wrong])
