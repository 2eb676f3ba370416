"""Long metadata values made readable at a glance on Dagster's asset page, the whole one click away.

What Dagster 1.13's asset page does with a value (ui-core ``MetadataEntry.tsx``, seen in a browser):
text is shown whole and wraps; Markdown shorter than 1,000 characters is rendered inline, a longer
one behind "[Show Markdown]" (a dialog, one click). Three things do not wrap: a URL, shown as
itself, a line of a code block and a row of a Markdown table; any of them, when long, widens the
value column past the page and every other value is cut off at its right edge. So every asset
shows links by a short label (``link``) and its long texts (reasons, diffs, diagnoses, code
blocks, tables) through ``long_text``: a wide code block or table short enough to show inline is
rewritten as Markdown that wraps (``wrapping``), a text too long to show inline is summed up.
"""

from __future__ import annotations

import re

import dagster as dg

INLINE_MARKDOWN_CHARS = 1000
"""Dagster's asset page renders Markdown up to this length inline; a text up to it is shown whole."""
CODE_LINE_CHARS = 40
"""The widest code-block line shown inline: about what the value column holds at a 1,400-pixel window."""
TABLE_LINE_CHARS = 50
"""The widest Markdown table row shown inline (proportional type: a little more than code)."""
SUMMARY_CHARS = 160
FULL_SUFFIX = "_full"


def link(label: str, url: str) -> dg.MetadataValue:
    """A link shown as its short ``label`` (Markdown, rendered inline), not as the long URL itself."""
    return dg.MetadataValue.md(f"[{label}]({url})")


def long_text(key: str, text: str, markdown: bool = False) -> dict:
    """``key``'s entries for ``text`` (plain, or Markdown with ``markdown``): the text itself while
    the page shows it whole (up to ``INLINE_MARKDOWN_CHARS``; a too wide code block or table
    rewritten to wrap); else a one-line summary under ``key`` and the whole as Markdown under
    ``key_full``, one click away (the dialog scrolls, so there the text stays as it is)."""
    shown = wrapping(text) if markdown and _too_wide(text) else text
    if len(shown) <= INLINE_MARKDOWN_CHARS:
        return {key: dg.MetadataValue.md(shown) if markdown else shown}
    return {key: summary(text, f"{key}{FULL_SUFFIX}"), f"{key}{FULL_SUFFIX}": dg.MetadataValue.md(text)}


def _too_wide(markdown: str) -> bool:
    """Whether ``markdown`` has a line that does not wrap and is wider than the value column: a
    code-block line over ``CODE_LINE_CHARS`` or a table row over ``TABLE_LINE_CHARS``."""
    inside = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif len(line) > (CODE_LINE_CHARS if inside else TABLE_LINE_CHARS if line.startswith("|") else len(line)):
            return True
    return False


def wrapping(markdown: str) -> str:
    """``markdown`` with what does not wrap rewritten so that it does: a code block's lines as lines
    of text (indents kept as no-break spaces), a table's rows as list items naming each cell's column."""
    out: list[str] = []
    table: list[str] = []
    inside = False
    for line in [*markdown.splitlines(), ""]:
        if table and not line.startswith("|"):
            out += _table_items(table) + [""]
            table = []
        if line.lstrip().startswith("```"):
            inside = not inside
            if out and out[-1]:
                out.append("")  # a code block becomes a paragraph of its own
        elif inside:
            stripped = line.lstrip(" ")
            text = re.sub(r"([\\`*_<>|#~])", r"\\\1", stripped)
            text = re.sub(r"^(\d+)([.)])", r"\1\\\2", re.sub(r"^([-+=])", r"\\\1", text))  # no list, no heading
            out.append("\u00a0" * (len(line) - len(stripped)) + text + "  ")
        elif line.startswith("|"):
            table.append(line)
        else:
            out.append(line)
    return "\n".join(out).strip()


def _table_items(rows: list[str]) -> list[str]:
    def cells(row: str) -> list[str]:
        return [c.strip() for c in row.strip().strip("|").split("|")]

    header = cells(rows[0])
    return [f"- **{row[0]}**: " + ", ".join(f"{h}: {c}" for h, c in zip(header[1:], row[1:], strict=False))
            for row in map(cells, rows[2:])]


def summary(text: str, where: str) -> str:
    """The first line of ``text`` that says something (not a code fence, heading marks dropped), cut
    at a word to ``SUMMARY_CHARS``, and how much there is and where."""
    lines = [line.strip().lstrip("#>").strip() for line in text.splitlines()]
    first = next((line for line in lines if line and not line.startswith("```")), "")
    if first.startswith("|"):  # a table: its size and columns
        columns = ", ".join(c.strip() for c in first.strip("|").split("|"))
        first = f"a table of {sum(line.startswith('|') for line in lines) - 2} rows: {columns}"
    if len(first) > SUMMARY_CHARS:
        first = first[:SUMMARY_CHARS].rsplit(" ", 1)[0] + " …"
    return f"{first} ({len(text):,} characters, {len(lines)} lines: the whole in {where})"
