"""GBNF grammars for LOG and PLAN turns, built from the scaffold and the game.

A small model left free mostly echoes its prompt; constrained to this grammar it can only
emit operations the scaffold enables, on files that exist, and actions the game accepts.
Every free-text rule has a length bound, because an unbounded rule lets a small model loop
until ``max_tokens``. The grammar also encodes the turn protocol:

* LOG: any number of writes (up to the budget), then ``<|DONE|>``: LOG records, it does not
  read, so it is one model call.
* PLAN: up to the budget's reads in one turn (results fed back), or the game action at once;
  the turn after a consultation allows only the action. In two-model mode the memory model
  ends its consultation with ``<|DONE|>`` and the game model's grammar is the action alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from automem_dagster.memory.ops import OpName

READ_OPS = (OpName.READ, OpName.TAIL, OpName.SEARCH, OpName.COUNT, OpName.SUMMARIZE)
WRITE_OPS = (OpName.CREATE, OpName.APPEND, OpName.WRITE, OpName.UPSERT, OpName.DELETE)


def _tok(op: OpName) -> str:
    return f'"<|{op.value}|>"'


# ``file`` is any existing file, ``wfile`` one the model may change, ``newfile`` a name to create.
_OP_RULES = {
    OpName.READ: f"{_tok(OpName.READ)} file",
    OpName.SUMMARIZE: f"{_tok(OpName.SUMMARIZE)} file",
    OpName.TAIL: f'{_tok(OpName.TAIL)} file "|" count',
    OpName.SEARCH: f'{_tok(OpName.SEARCH)} file "|" keyword',
    OpName.COUNT: f'{_tok(OpName.COUNT)} file "|" keyword',
    OpName.CREATE: f"{_tok(OpName.CREATE)} newfile",
    OpName.APPEND: f'{_tok(OpName.APPEND)} wfile "|" text',
    OpName.WRITE: f'{_tok(OpName.WRITE)} wfile "|" text',
    OpName.UPSERT: f'{_tok(OpName.UPSERT)} wfile "|" key "|" text',
    OpName.DELETE: f"{_tok(OpName.DELETE)} wfile",
}
_NEEDS_WRITABLE_FILE = {OpName.APPEND, OpName.WRITE, OpName.UPSERT, OpName.DELETE}


def _literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _alternatives(options: Iterable[str]) -> str:
    return " | ".join(_literal(o) for o in options)


class TurnGrammar:
    """Builds the rules shared by every turn of one scaffold; per-turn roots are cheap to add."""

    def __init__(self, operations: Iterable[OpName], text_max: int, key_max: int, keyword_max: int):
        self.operations = list(operations)
        self.text_max = text_max
        self.key_max = key_max
        self.keyword_max = keyword_max

    def _common(self, files: list[str], writable: list[str]) -> list[str]:
        lines = [
            f"file ::= {_alternatives(files)}",
            "count ::= [1-9] [0-9]?",
            f"text ::= [^|<\\n]{{1,{self.text_max}}}",
            f"key ::= [^|<\\n:]{{1,{self.key_max}}}",
            f"keyword ::= [^|<\\n]{{1,{self.keyword_max}}}",
            'newfile ::= [a-z0-9_] [a-z0-9_-]{0,30} ".txt"',
        ]
        if writable:
            lines.append(f"wfile ::= {_alternatives(writable)}")
        return lines

    def _ops(self, kinds: tuple[OpName, ...], has_writable: bool) -> list[str]:
        """Rules for the enabled operations of ``kinds``; writes to existing files need a writable one."""
        return [
            _OP_RULES[op] for op in self.operations
            if op in kinds and (has_writable or op not in _NEEDS_WRITABLE_FILE)
        ]

    def log_turn(self, files: list[str], writable: list[str], remaining: int, least: int = 0) -> str:
        """At least ``least`` (where there is something to write) and up to ``remaining`` writes, then DONE."""
        writes = self._ops(WRITE_OPS, bool(writable))
        lines = self._common(files, writable)
        root = '"<|DONE|>"'
        if writes:
            lines.append("write ::= " + " | ".join(f"({w})" for w in writes))
            root = f'(write "\\n"){{{min(least, remaining)},{remaining}}} "<|DONE|>"'
        return "\n".join([f"root ::= {root}", *lines]) + "\n"

    def plan_turn(self, files: list[str], actions: list[str], consult: bool, end_with_done: bool = False,
                  reads: int = 1, least: int = 0) -> str:
        """A consultation of up to ``reads`` reads (on ``files``), or the end of the phase.

        The end is the action (one-model) or ``<|DONE|>`` (``end_with_done``: the memory
        model in two-model mode hands over to the game model). With ``least`` (the scaffold's
        ``plan_min_reads``) and something to read, the turn must read at least that many times:
        the end is not offered.
        """
        ending = '"<|DONE|>"' if end_with_done else "action"
        read_ops = self._ops(READ_OPS, False) if consult and files and reads > 0 else []
        least = min(least, reads) if read_ops else 0
        choices = (["reads"] if read_ops else []) + ([] if least else [ending])
        lines = [f"root ::= {' | '.join(choices)}"]
        if read_ops:
            lines += self._common(files, [])
            lines.append("read ::= " + " | ".join(f"({r})" for r in read_ops))
            lines.append(f'reads ::= read ("\\n" read){{{max(least - 1, 0)},{reads - 1}}}')
        if not end_with_done and not least:
            lines.append(action_rule(actions))
        return "\n".join(lines) + "\n"


def action_rule(actions: list[str]) -> str:
    return f'action ::= "<|ACTION|>" ({_alternatives(actions)}) "<|END|>"'


def action_grammar(actions: list[str]) -> str:
    """The game model's turn in two-model mode: exactly one action."""
    return f"root ::= action\n{action_rule(actions)}\n"


def reasoning_grammar(actions: list[str], max_chars: int) -> str:
    """A chain-of-thought turn: one line of at most ``max_chars`` characters of reasoning, then one action.

    The reasoning is printable ASCII without ``<``: it cannot start a token of its own, nor run
    on past its bound (the same length rule as every other free-text rule here), and since an
    ASCII character is never more than one token, the whole reply has a known bound in tokens."""
    return f'root ::= thought "\\n" action\nthought ::= [ -;=-~]{{1,{max_chars}}}\n{action_rule(actions)}\n'


def summary_grammar(max_chars: int) -> str:
    """The summary baseline's rewrite of its running summary: one paragraph of at most ``max_chars``
    printable ASCII characters without ``<`` (so it cannot open a token of the action syntax)."""
    return f"root ::= [ -;=-~]{{1,{max_chars}}}\n"
