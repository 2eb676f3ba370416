"""What the memory store accepts: file names (flat, ASCII, never a device or a path), the bounds
on files and operations, the refusal it raises, and the line helpers it reads and writes with."""

from __future__ import annotations

import os
import re
import stat
import tempfile

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*", re.ASCII)
NAME_HINT = "use a plain file name such as notes.txt (ASCII letters, digits, '_', '.', '-'; no folders)"
RESERVED_NAMES = frozenset({"CON", "PRN", "AUX", "NUL", "CLOCK$",
                            *(f"{port}{n}" for port in ("COM", "LPT") for n in range(1, 10))})
"""Device names Windows reserves in every folder, whatever the extension (``nul.txt`` is the device too)."""

class MemoryLimits(BaseModel):
    """Bounds that keep one episode's memory small enough for a prompt and a disk."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_files: int = Field(default=32, ge=1)
    max_file_bytes: int = Field(default=64_000, ge=1)
    max_op_chars: int = Field(default=1_000, ge=1)
    max_name_len: int = Field(default=64, ge=1, le=64)
    max_read_chars: int = Field(default=2_000, ge=100)


DEFAULT_LIMITS = MemoryLimits()


class MemoryStoreError(ValueError):
    """A refused harness call (``init_file``, ``sync``, ``read_text``); ``execute`` returns these as results."""


def name_problem(name: str, max_len: int = 64) -> str | None:
    """Why ``name`` is not an acceptable memory file name, or None when it is."""
    if not name:
        return "the name is empty"
    if len(name) > max_len:
        return f"it is {len(name)} characters long, over the {max_len}-character limit"
    if not name.isascii():
        return "it contains non-ASCII characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "it contains control characters"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if ".." in name:
        return "it contains '..'"
    if name.startswith("."):
        return "it starts with '.'"
    if name[-1] in " .":
        return (f"it ends with {name[-1]!r}, which Windows drops, so it would name another file "
                f"({name.rstrip(' .')!r})")
    if not NAME_PATTERN.fullmatch(name):
        return "it contains characters other than letters, digits, '_', '.' and '-'"
    if name.split(".")[0].upper() in RESERVED_NAMES:
        return f"{name.split('.')[0]!r} is a device name Windows reserves (CON, PRN, AUX, NUL, COM1-9, LPT1-9)"
    return None


def split_lines(content: str) -> list[str]:
    lines = content.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def join_lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


def line_present(lines: list[str], text: str) -> bool:
    wanted = text.strip()
    return any(line.strip() == wanted for line in lines)


def key_of(line: str) -> str | None:
    key, sep, _ = line.partition(": ")
    return key.strip() if sep else None


def check_plain(name: str, info: os.stat_result) -> None:
    """Refuse anything at ``name`` but a plain file with one link (no symlink, directory, device, hard link)."""
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise MemoryStoreError(f"{name} is not a plain memory file (a link or special file); use another name")


def read_plain(path: str, name: str, max_bytes: int) -> bytes:
    """The bytes of the plain file at ``path``: opened with ``O_NOFOLLOW`` and checked with ``fstat``
    (closing the race after an lstat check); FileNotFoundError when it vanished meanwhile."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise  # the caller names the missing file and the files there are
    except OSError as exc:
        raise MemoryStoreError(f"{name} cannot be read ({exc.strerror}); use another name") from None
    try:
        check_plain(name, os.fstat(fd))
    except MemoryStoreError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise MemoryStoreError(f"{name} is larger than {max_bytes} bytes and cannot be read")
    return data


def replace_file(root: str, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in ``root``, then ``os.replace`` (which
    replaces a link rather than following it)."""
    fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=root)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
