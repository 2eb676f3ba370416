"""Scripted players of the built-in key-and-door game whose useful and harmful memory decisions are known
by the game's design, and the check of a curation against them (tests/contract/test_known_answer_variants.py).

The game (``games/keydoor.py``) shows the key's wing once on a sign; a decoy (``decoys1``) says an old key
was lost in some wing. The scripted memory model notes both as ``key: <wing> wing`` (the decoy is a wrong
fact), writes junk in the hall and at the junction, and reads its notes only at the junction. The game
model acts on the tags of the observation; at the junction it enters the east wing when a consulted line
says ``key: east wing``, else the west wing when one says west, else it guesses west (``guess``) or
hesitates with an invalid action (``hesitate``: the agent reads again at the next step). So whether a
decision helped follows from the notes alone (``known_answer``): a note helped when the choice with it
finds the key and without it does not, and harmed in the opposite case; the junction's first read is
compared with the choice made without consulting; a hesitating player's read saves an invalid action.

The players are rules of the seeded stand-in (``standins/seeded_server.py``), which draws a rule's reply
from the request's seed: with ``noise`` the game model in the hall answers an invalid action now and then,
as a sampling model does, which costs errors and never a step of progress.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from automem_dagster.agent import prompts
from automem_dagster.rollout.trajectory import read_trajectory

WINGS = ("west", "east")
GUESS = "west"


def _turn(*ops: str) -> str:
    return "\n".join([*ops, "<|DONE|>"])


def _act(action: str) -> str:
    return f"<|ACTION|>{action}<|END|>"


def _notes() -> list[dict]:
    """LOG rules of the memory model: the sign's wing, the decoy's (a wrong fact), junk in hall and junction."""
    rules = [{"match": f"the key lies in the {w.upper()} wing", "reply": _turn(f"<|APPEND|>notes.txt|key: {w} wing")}
             for w in WINGS]
    rules += [{"match": f"an old key was lost in the {w} wing", "reply": _turn(f"<|APPEND|>notes.txt|key: {w} wing")}
              for w in WINGS]
    return rules + [{"match": "[junction]", "reply": _turn("<|APPEND|>notes.txt|the walls are grey")},
                    {"match": "The hallway goes on.", "reply": _turn("<|APPEND|>notes.txt|the hallway is long")}]


def _at_junction(without: str) -> list[dict]:
    """The junction's choice from the lines the request shows: east before west, else ``without``."""
    return [{"match": ["[junction]", "key: east wing"], "reply": _act("east")},
            {"match": ["[junction]", "key: west wing"], "reply": _act("west")},
            {"match": "[junction]", "reply": _act(GUESS if without == "guess" else "wait")}]


def _hall(noise: float) -> dict:
    choices = [[_act("forward"), 1.0 - noise], [_act("dance"), noise]] if noise else [[_act("forward"), 1.0]]
    return {"match": "", "choices": choices}


def two_model_rules(without: str = "guess", noise: float = 0.0) -> tuple[list[dict], list[dict]]:
    """(game model, memory model) rules of the two-model agent."""
    plan = prompts.plan_phase("memory")
    memory = [{"match": [plan, "[junction]"], "reply": _turn("<|READ|>notes.txt")}, {"match": plan, "reply": "<|DONE|>"},
              *_notes(), {"match": "", "reply": "<|DONE|>"}]
    game = [{"match": "[door]", "reply": _act("open")}, {"match": "[wing]", "reply": _act("forward")},
            *_at_junction(without), _hall(noise)]
    return game, memory


def one_model_rules() -> list[dict]:
    """Rules of the one-model agent: read at the junction, act on the results; LOG as the memory model."""
    plan = prompts.plan_phase("agent")
    results = [{**r, "match": [plan, "Results:", *r["match"][1:]]} for r in _at_junction("guess")[:2]]
    return [*results, {"match": [plan, "Results:"], "reply": _act(GUESS)},
            {"match": [plan, "[junction]"], "reply": "<|READ|>notes.txt"},
            {"match": [plan, "[door]"], "reply": _act("open")}, {"match": plan, "reply": _act("forward")},
            *_notes(), {"match": "", "reply": "<|DONE|>"}]


def known_answer(batch: Path, without: str = "guess", reads: str = "outcome") -> tuple[set, set]:
    """(useful, harmful) decisions as (episode, step, phase), by the game's design. ``without``: what the game
    model does at the junction with no key line (``guess`` west, or ``hesitate`` forever). ``reads``:
    ``outcome`` (the junction's first read is judged by the choice made without it) or ``error`` (without it
    the agent loses a step to an invalid action and reads again at the next step, so it always helped)."""
    useful, harmful = set(), set()
    for path in sorted((batch / "trajectories").glob("*.jsonl")):
        header, steps, _ = read_trajectory(path)
        episode, wing = header["episode"], re.search(r"lies in the (\w+) wing", steps[1]["observation"])[1].lower()
        junction = next(t for t, s in enumerate(steps) if "[junction]" in s["observation"])
        notes = [(t, r["op"].rsplit("|", 1)[1]) for t, s in enumerate(steps[:junction]) for turn in s["turns"]
                 if turn["phase"] == "log" for r in turn["ops"] if "|key: " in r["op"]]

        def finds(lines: list[str], wing: str = wing) -> bool:
            east, west = "key: east wing" in lines, "key: west wing" in lines
            return ("east" if east else "west" if west else GUESS if without == "guess" else None) == wing

        everything = [line for _, line in notes]
        for t, _ in notes:
            rest = [other for u, other in notes if u != t]
            if finds(everything) and not finds(rest):
                useful.add((episode, t, "log"))
            elif not finds(everything) and finds(rest):
                harmful.add((episode, t, "log"))
        if reads == "error" or (finds(everything) and GUESS != wing):
            useful.add((episode, junction, "plan"))
        elif not finds(everything) and GUESS == wing:
            harmful.add((episode, junction, "plan"))
    return useful, harmful


def judged(out: Path, useful: set, harmful: set, label: str) -> dict:
    """Precision, recall and harmful decisions kept of the curation in ``out``, printed with ``label``. A useful
    decision dropped only as an exact repeat of a kept one (the same wing's note) counts as found."""
    decisions = [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]
    key = {d["id"]: (d["episode"], d["step"], d["phase"]) for d in decisions}
    kept = {key[d["id"]] for d in decisions if d["fate"] in ("accepted", "reviewed_kept")}
    found = kept | {key[d["id"]] for d in decisions if d["fate"] == "duplicate"}
    stats = json.loads((out / "stats.json").read_text())
    figures = {"kept": len(kept), "precision": len(kept & useful) / len(kept) if kept else 0.0,
               "recall": len(found & useful) / len(useful) if useful else 1.0, "harmful_kept": len(kept & harmful),
               "useful": len(useful), "harmful": len(harmful), "floor": stats["replay"]["floor"],
               "replayed": stats["replay"]["replayed"], "unmeasured": stats["replay"]["unmeasured"]}
    print(f"known-answer check ({label}): kept {figures['kept']}, precision {figures['precision']:.2f}, recall "
          f"{figures['recall']:.2f}, harmful kept {figures['harmful_kept']} (of {figures['useful']} useful and "
          f"{figures['harmful']} harmful decisions); credit floor {figures['floor']:g}; {figures['replayed']} "
          f"replayed, {figures['unmeasured']} unmeasured")
    return figures
