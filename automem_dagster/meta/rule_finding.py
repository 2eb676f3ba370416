"""What one rule of the rules meta found (``RuleFinding``), and where a batch-wide fact is cited.

Its own module so that the rules on the memory routine (``meta/routine_rules.py``) and the other
rules (``meta/rules_reviser.py``) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RuleFinding:
    """What one rule found, the evidence it cites, and its share of the patch."""

    kind: str
    episode: str
    step: int
    what_happened: str
    scaffold_cause: str
    proposed_change: str
    patch: dict = field(default_factory=dict)

    def as_finding(self) -> dict:
        """The finding in the ``diagnose.Finding`` fields (texts cut to its 160 characters)."""
        return {"episode": self.episode, "step": self.step, "kind": self.kind,
                "what_happened": self.what_happened[:160], "scaffold_cause": self.scaffold_cause[:160],
                "proposed_change": self.proposed_change[:160]}


def end_of_first(evidence: dict) -> tuple[str, int]:
    """Where a batch-wide fact is cited: the last step of the first episode (the fact holds there)."""
    first = evidence["episodes"][0]
    return first["episode"], max(first["steps"] - 1, 0)
