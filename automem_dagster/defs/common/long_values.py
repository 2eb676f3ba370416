"""Long metadata values made readable at a glance on Dagster's asset page, the whole one click away.

What Dagster 1.13's asset page does with a value (ui-core ``MetadataEntry.tsx``, seen in a browser):
text is shown whole and wraps; Markdown shorter than 1,000 characters is rendered inline, a longer
one behind "[Show Markdown]" (a dialog, one click). Two things do not wrap: a URL, shown as
itself, and a line of a code block; either one, when long, widens the value column past the page
and every other value is cut off at its right edge. So every asset shows links by a short label
(``link``) and its long texts (reasons, diffs, diagnoses, code blocks) through ``long_text``.
"""

from __future__ import annotations

import dagster as dg

INLINE_MARKDOWN_CHARS = 1000
"""Dagster's asset page renders Markdown up to this length inline; a text up to it is shown whole."""
CODE_LINE_CHARS = 40
"""The widest code-block line shown inline: about what the value column holds at a 1,400-pixel window."""
SUMMARY_CHARS = 160
FULL_SUFFIX = "_full"


def link(label: str, url: str) -> dg.MetadataValue:
    """A link shown as its short ``label`` (Markdown, rendered inline), not as the long URL itself."""
    return dg.MetadataValue.md(f"[{label}]({url})")


def long_text(key: str, text: str, markdown: bool = False) -> dict:
    """``key``'s entries for ``text`` (plain, or Markdown with ``markdown``): the text itself while
    the page shows it whole (up to ``INLINE_MARKDOWN_CHARS``, code lines up to ``CODE_LINE_CHARS``);
    else a one-line summary under ``key`` and the whole as Markdown under ``key_full``, one click away."""
    if len(text) <= INLINE_MARKDOWN_CHARS and not (markdown and _wide_code(text)):
        return {key: dg.MetadataValue.md(text) if markdown else text}
    return {key: summary(text, f"{key}{FULL_SUFFIX}"), f"{key}{FULL_SUFFIX}": dg.MetadataValue.md(text)}


def _wide_code(markdown: str) -> bool:
    """Whether a code block of ``markdown`` has a line wider than ``CODE_LINE_CHARS`` (it would not wrap)."""
    inside = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and len(line) > CODE_LINE_CHARS:
            return True
    return False


def summary(text: str, where: str) -> str:
    """The first line of ``text`` that says something (not a code fence, heading marks dropped), cut
    at a word to ``SUMMARY_CHARS``, and how much there is and where."""
    lines = [line.strip().lstrip("#>").strip() for line in text.splitlines()]
    first = next((line for line in lines if line and not line.startswith("```")), "")
    if len(first) > SUMMARY_CHARS:
        first = first[:SUMMARY_CHARS].rsplit(" ", 1)[0] + " …"
    return f"{first} ({len(text):,} characters, {len(lines)} lines: the whole in {where})"
