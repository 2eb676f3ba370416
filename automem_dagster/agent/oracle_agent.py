"""The oracle baseline: the window agent with the needed facts of its episode always in memory.

It answers the first question of memory's headroom: can the acting model use a note when the note
is there? Its score is the ceiling a memory could reach with this actor, the window baseline with
no history (``window 0``) the floor, and v0 sits between (``automem headroom``). The facts come
from the game (``oracle_notes()``, which the memory games of ``games/recall.py`` give) and are shown
before every step as a consultation's results would be, so the rule actor reads them as it reads
a memory agent's consultation.
"""

from __future__ import annotations

from automem_dagster.agent.baselines import WindowAgent
from automem_dagster.llm.rule_actor import CONSULTED


class OracleAgent(WindowAgent):
    """``WindowAgent`` whose memory shows ``notes`` at every step."""

    def __init__(self, notes: list[str], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.notes = list(notes)

    def memory_text(self) -> str:
        return CONSULTED + "\n".join(self.notes)

    def memory_context(self) -> dict:
        return {"oracle_notes": self.notes}
