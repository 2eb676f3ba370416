"""The demo's named configs (``loop/settings.DEMO``, ``DEMO_STRUCTURE``) as ``automem demo`` combines them."""

from automem_dagster.commands.demo import demo_structure
from automem_dagster.loop.settings import DEMO, DEMO_STRUCTURE


def test_the_demo_structure_round_diagnoses_fewer_episodes_on_the_proficiency_rounds_budget():
    """The demo's structure round plays ``DEMO``'s episodes and seeds but diagnoses ``DEMO_STRUCTURE``'s few
    training episodes, at the concurrency the demo was given (``--concurrency``)."""
    given = DEMO.model_copy(update={"budget": DEMO.budget.model_copy(update={"concurrency": 2})}).for_game(DEMO.game)
    structure = demo_structure(given)
    assert structure.game == DEMO.game and structure.gate == DEMO.gate
    assert structure.budget.rollout_episodes == DEMO_STRUCTURE.budget.rollout_episodes < DEMO.budget.rollout_episodes
    assert structure.budget.concurrency == 2
    same = ("rollout_max_steps", "eval_max_steps", "eval_episodes", "max_attempts")
    assert [getattr(structure.budget, f) for f in same] == [getattr(DEMO.budget, f) for f in same]
