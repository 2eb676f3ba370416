"""When the agent LOGs: under the shipped routine's triggers and ``log_every``, and under another routine's."""


from shipped_routine import LOG_EVERY, SHIPPED

from automem_dagster.agent.savings import log_due
from automem_dagster.scaffold import Routine


def test_log_runs_after_what_the_history_line_does_not_show():
    """Under the shipped routine a reward, an inventory or a level change LOGs at once; a position change
    alone does not; nothing LOGs at step 0; ``log_every`` steps after the latest LOG, LOG runs whatever
    happened. Other triggers are the routine's to choose."""
    start, moved = ((1, 1), (), ()), ((2, 1), (), ())
    assert not log_due(0, [], [start], 0, SHIPPED)
    assert not log_due(1, [("move_east", 0.0)], [start, moved], 0, SHIPPED)
    assert not log_due(3, [("noop", 0.0)], [moved, moved], 0, SHIPPED)
    assert log_due(1, [("do", 1.0)], [start, start], 0, SHIPPED)
    assert log_due(2, [("do", 0.0)], [moved, ((2, 1), (("wood", 1),), ())], 0, SHIPPED)
    assert log_due(2, [("do", 0.0)], [moved, ((2, 1), (), (("achievements", 1),))], 0, SHIPPED)
    assert log_due(LOG_EVERY, [("move_east", 0.0)], [start, moved], 0, SHIPPED)
    assert not log_due(LOG_EVERY + 2, [("move_east", 0.0)], [start, moved], 3, SHIPPED)
    walker = Routine(log_every=50, log_triggers=["position"])
    assert log_due(1, [("move_east", 0.0)], [start, moved], 0, walker)
    assert not log_due(2, [("do", 1.0)], [moved, moved], 1, walker)
