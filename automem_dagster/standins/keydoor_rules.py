"""The scripted model of the key-and-door game (``examples/keydoor_plugin``), as rules for the
scripted stand-in server (``standins/scripted_server.py``: the first rule whose ``match`` occurs in
the request's messages answers).

It is played in two-model mode, so each server sees one role's requests:

- the **memory** model consults by reading ``notes.txt`` in every PLAN; in LOG it writes the key's
  wing when the sign is in sight (the useful note), a junk line in the hallway and at the junction
  (notes no later step needs), and nothing otherwise;
- the **game** model walks forward in the hallway and the passage and opens the door; at the
  junction it enters the wing that the consulted notes name (``key: west wing``) and, with no such
  line, walks into the wall, as a player who forgot the sign would.

So the game's outcome depends on exactly one kind of memory decision: the note of the key's wing
and the read that shows it at the junction. No rule counts requests or cycles replies: the same
request always gets the same answer, which a counterfactual replay's paired arms rely on.
"""

from __future__ import annotations

from automem_dagster.agent import prompts

JUNK = {"[hall]": "the hallway is long", "[junction]": "the walls are grey"}
"""The junk notes: true, but nothing a later step acts on."""


def _turn(*ops: str) -> str:
    return "\n".join([*ops, "<|DONE|>"])


def memory_rules() -> list[dict]:
    """The memory model: consult every PLAN, note the key's wing, write junk elsewhere."""
    rules = [{"match": prompts.plan_phase("memory"), "reply": _turn("<|READ|>notes.txt")}]
    rules += [{"match": f"the key lies in the {wing.upper()} wing",
               "reply": _turn(f"<|APPEND|>notes.txt|key: {wing} wing")} for wing in ("west", "east")]
    rules += [{"match": tag, "reply": _turn(f"<|APPEND|>notes.txt|{text}")} for tag, text in JUNK.items()]
    return [*rules, {"match": "", "reply": "<|DONE|>"}]


def game_rules() -> list[dict]:
    """The game model: act on the observation's place tag and, at the junction, on the consulted notes."""
    rules = [{"match": "[door]", "reply": "<|ACTION|>open<|END|>"},
             {"match": "[wing]", "reply": "<|ACTION|>forward<|END|>"},
             {"match": "[hall]", "reply": "<|ACTION|>forward<|END|>"}]
    rules += [{"match": f"key: {wing} wing", "reply": f"<|ACTION|>{wing}<|END|>"} for wing in ("west", "east")]
    return [*rules, {"match": "", "reply": "<|ACTION|>forward<|END|>"}]
