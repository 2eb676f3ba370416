"""The memory operation vocabulary and the parser that turns model text into operations.

The model writes operations as tokens (``<|APPEND|>notes.txt|found water``) mixed with
whatever prose it likes. Parsing never raises: every malformed fragment becomes an error
string that names the fragment and the expected syntax, because those strings are shown
back to the model so it can correct itself on the next turn. The game action
(``<|ACTION|>a<|END|>``) is returned separately since the agent, not the store, handles it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from automem_dagster.cpu_ledger import LEDGER


class OpName(StrEnum):
    """Every memory operation a scaffold can enable; the value is the token name."""

    CREATE = "CREATE"
    READ = "READ"
    TAIL = "TAIL"
    SEARCH = "SEARCH"
    COUNT = "COUNT"
    APPEND = "APPEND"
    WRITE = "WRITE"
    UPSERT = "UPSERT"
    DELETE = "DELETE"
    SUMMARIZE = "SUMMARIZE"
    DONE = "DONE"


@dataclass(frozen=True)
class Op:
    """One parsed operation. ``args`` are the arguments after the file; ``raw`` is the source fragment."""

    name: OpName
    file: str | None
    args: tuple[str, ...] = ()
    raw: str = ""


@dataclass(frozen=True)
class OpResult:
    """What an operation did, as text for the model plus flags for the behaviour metrics.

    ``redundant`` marks a write of a line the file already held, ``empty`` a read that showed no
    line (a SEARCH or COUNT that matched nothing, a READ or TAIL of an empty file), ``changed`` that
    the file's content changed on disk.
    """

    ok: bool
    text: str
    redundant: bool = False
    empty: bool = False
    changed: bool = False


@dataclass
class ParseResult:
    """Everything found in one model reply, in order, plus the game action if one was given."""

    ops: list[Op] = field(default_factory=list)
    action: str | None = None
    errors: list[str] = field(default_factory=list)


# Parameter names per operation, in token order; the first is always the file.
_PARAMS: dict[OpName, tuple[str, ...]] = {
    OpName.CREATE: ("file",),
    OpName.READ: ("file",),
    OpName.TAIL: ("file", "N"),
    OpName.SEARCH: ("file", "keyword"),
    OpName.COUNT: ("file", "keyword"),
    OpName.APPEND: ("file", "text"),
    OpName.WRITE: ("file", "text"),
    OpName.UPSERT: ("file", "key", "text"),
    OpName.DELETE: ("file",),
    OpName.SUMMARIZE: ("file",),
    OpName.DONE: (),
}

# Operations whose last argument is free text and may itself contain '|'.
_FREE_TEXT_LAST = frozenset({OpName.SEARCH, OpName.COUNT, OpName.APPEND, OpName.WRITE, OpName.UPSERT})

_MEANING: dict[OpName, str] = {
    OpName.CREATE: "create an empty memory file",
    OpName.READ: "show the whole file",
    OpName.TAIL: "show the last N lines",
    OpName.SEARCH: "show the lines containing keyword (case-insensitive)",
    OpName.COUNT: "count the lines containing keyword (case-insensitive)",
    OpName.APPEND: "add text as a new last line",
    OpName.WRITE: "replace the whole file with the single line text",
    OpName.UPSERT: "set the line 'key: text', replacing that key's previous line",
    OpName.DELETE: "delete the file",
    OpName.SUMMARIZE: "line counts plus the first and last lines",
    OpName.DONE: "end the memory phase",
}


def _pattern(name: OpName) -> str:
    params = _PARAMS[name]
    return f"<|{name.value}|>" + "|".join(params)


OP_SYNTAX: dict[OpName, str] = {name: f"{_pattern(name)}  {_MEANING[name]}" for name in OpName}
"""One line per operation, syntax then meaning, for the scaffold prompt to list."""

READ_ONLY_OPS = frozenset({OpName.READ, OpName.TAIL, OpName.SEARCH, OpName.COUNT, OpName.SUMMARIZE, OpName.DONE})
"""The operations allowed in the PLAN phase, which consults memory but never changes it."""

ACTION_SYNTAX = "<|ACTION|>action<|END|>"

_TOKEN = re.compile(r"<\|([^|<>\n]*)\|>")
_ARG_END = re.compile(r"<\||\n")
_DIGITS = re.compile(r"[0-9]{1,9}")


def quote(text: str, limit: int = 80) -> str:
    """Quote model-supplied text for a message: bounded, with control characters escaped."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def validate_op(op: Op) -> str | None:
    """Why ``op`` is malformed (arity, empty arguments, bad N), or None when well formed.

    The parser only builds well-formed ops, but the store re-checks because callers may
    build ``Op`` objects directly.
    """
    params = _PARAMS[op.name]
    if not params:
        return None if op.file is None and not op.args else f"{op.name.value} takes no arguments"
    if not op.file or not op.file.strip():
        return "missing file name"
    if len(op.args) != len(params) - 1:
        return f"expected {len(params) - 1} argument(s) after the file, got {len(op.args)}"
    for param, arg in zip(params[1:], op.args, strict=True):
        if not arg.strip():
            return f"missing {param}"
    if op.name is OpName.UPSERT and "|" in op.args[0]:
        return "the key must not contain '|'"
    if op.name is OpName.TAIL:
        return _count_problem(op.args[0].strip())
    return None


def _count_problem(text: str) -> str | None:
    if not _DIGITS.fullmatch(text):
        return f"N must be a whole number of lines (at most 9 digits), got {quote(text)}"
    if int(text) == 0:
        return "N must be at least 1"
    return None


def file_name(raw: str) -> str:
    """A file argument as a name: spaces and tabs around it separate it from the syntax (as around
    every argument), so ``<|READ|>map.txt <|DONE|>`` and a direct ``Op(READ, "map.txt ")`` both name
    ``map.txt``. Anything else (a newline, a trailing dot) stays and the store's one name rule judges it."""
    return raw.strip(" \t")


def format_op(op: Op) -> str:
    """Render ``op`` in token syntax; parsing the result gives back the same name, file and args."""
    if op.file is None:
        return f"<|{op.name.value}|>"
    return f"<|{op.name.value}|>" + "|".join((op.file, *op.args))


@LEDGER.charged("parse")
def parse_ops(text: str) -> ParseResult:
    """Find every operation token in ``text``; never raises.

    An operation's argument text runs from its token to the next ``<|`` or the end of the
    line. Text outside tokens is ignored, and so is any text after ``<|DONE|>``. The first
    ``<|ACTION|>`` wins (its ``<|END|>`` may be missing); later ones are reported as errors.
    """
    result = ParseResult()
    for match in _TOKEN.finditer(text):
        token = match.group(1).strip().upper()
        arg = _argument(text, match.end())
        fragment = (match.group(0) + arg).strip()
        if token == "END":
            continue
        if token == "ACTION":
            _take_action(result, arg.strip(), fragment)
            continue
        try:
            name = OpName(token)
        except ValueError:
            result.errors.append(_unknown(match.group(1), fragment))
            continue
        parsed = _parse_op(name, arg, fragment)
        if isinstance(parsed, Op) and _broken_name(name, text, match.end() + len(arg)):
            parsed = (f"{quote(fragment + text[match.end() + len(arg):][:20])}: a newline inside the file name; "
                      "a name is one line (e.g. notes.txt)")
        if isinstance(parsed, Op):
            result.ops.append(parsed)
        else:
            result.errors.append(parsed)
    return result


def _argument(text: str, start: int) -> str:
    end = _ARG_END.search(text, start)
    return text[start : end.start() if end else len(text)]


def _take_action(result: ParseResult, action: str, fragment: str) -> None:
    if not action:
        result.errors.append(f"{quote(fragment)}: empty action; expected {ACTION_SYNTAX}")
    elif result.action is not None:
        result.errors.append(f"{quote(fragment)}: only one action per turn; kept {quote(result.action)}, ignored this one")
    else:
        result.action = action


def _unknown(token: str, fragment: str) -> str:
    known = ", ".join(name.value for name in OpName)
    return f"{quote(fragment)}: unknown operation {quote(token)}; use one of {known} or {ACTION_SYNTAX}"


def _parse_op(name: OpName, arg: str, fragment: str) -> Op | str:
    """Split the argument text by '|' into the operation's parameters, or explain why not."""
    params = _PARAMS[name]
    if not params:
        return Op(name, None, (), fragment)
    maxsplit = len(params) - 1 if name in _FREE_TEXT_LAST else -1
    pieces = [piece.strip() for piece in arg.split("|", maxsplit)]
    expected = f"expected {_pattern(name)}"
    if len(pieces) > len(params):
        return f"{quote(fragment)}: too many arguments ({name.value} takes {', '.join(params)}); {expected}"
    if len(pieces) < len(params):
        return f"{quote(fragment)}: missing {', '.join(params[len(pieces) :])}; {expected}"
    op = Op(name, file_name(pieces[0]), tuple(pieces[1:]), fragment)
    problem = validate_op(op)
    return f"{quote(fragment)}: {problem}; {expected}" if problem else op


_NAME_CONTINUES = re.compile(r"\n[._-][A-Za-z0-9_.-]")
"""A newline right before '.', '_' or '-' and more name: a name broken over two lines (``file\n.txt``)."""


def _broken_name(name: OpName, text: str, end: int) -> bool:
    """True when a file-only operation's name is cut by a newline that the name visibly continues after,
    so ``<|CREATE|>file\n.txt`` is refused instead of acting on ``file``."""
    return _PARAMS[name] == ("file",) and _NAME_CONTINUES.match(text, end) is not None
