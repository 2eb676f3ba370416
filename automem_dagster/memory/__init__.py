"""Sandboxed file memory for the agent: operation vocabulary, parser, file policies, store, journal.

The agent's loop is: model text -> ``parse_ops`` -> ``store.execute(op)`` per operation ->
``OpResult.text`` shown back to the model. The harness sets up a scaffold's files with
``store.init_file`` and refreshes synced files with ``store.sync``.
"""

from .files import MemoryLimits, MemoryStoreError, name_problem
from .journal import Journal, JournalEntry
from .ops import (
    OP_SYNTAX,
    READ_ONLY_OPS,
    Op,
    OpName,
    OpResult,
    ParseResult,
    format_op,
    parse_ops,
    validate_op,
)
from .policy import FilePolicy
from .store import MemoryStore

__all__ = [
    "OP_SYNTAX",
    "READ_ONLY_OPS",
    "FilePolicy",
    "Journal",
    "JournalEntry",
    "MemoryLimits",
    "MemoryStore",
    "MemoryStoreError",
    "Op",
    "OpName",
    "OpResult",
    "ParseResult",
    "format_op",
    "name_problem",
    "parse_ops",
    "validate_op",
]
