"""One flag per budget in every command, and the retired flags that once meant a different budget in each.

``--max-steps`` was ``rollout``'s 50 steps, a round's training-seed steps, ``evaluate``'s evaluation steps
and the demo's; ``--episodes`` was a number of training seeds or of evaluation seeds. Each budget now has
one name (``loop/settings.py``) and one flag, and an old command line is refused naming the new flags
rather than run with a budget it did not mean. ``cli.build_parser`` gives every command the retired flags.
"""

from __future__ import annotations

import argparse

BUDGET_FLAGS = {"--rollout-episodes": "training-seed episodes", "--rollout-max-steps": "steps per training-seed episode",
                "--eval-episodes": "evaluation seeds", "--eval-max-steps": "steps per evaluation episode"}
"""One flag per budget, the same in every command that has that budget."""
RETIRED_FLAGS = {"--episodes": ("--rollout-episodes", "--eval-episodes"),
                 "--max-steps": ("--rollout-max-steps", "--eval-max-steps")}
"""Each retired flag and the budget flags that replace it (a command names those it has)."""


class RetiredFlag(argparse.Action):
    """A retired flag: refused (exit 2) naming the flags of the command that replace it, so an old command
    line stops at once instead of running with a budget it did not mean."""

    def __init__(self, option_strings, dest, replaced_by: tuple[str, ...] = (), **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.replaced_by = replaced_by

    def __call__(self, parser, namespace, values, option_string=None):
        use = " or ".join(f"{flag} ({BUDGET_FLAGS[flag]})" for flag in self.replaced_by)
        parser.error(f"{option_string} is retired (it meant a different budget in each command): use {use}")


def refuse_retired_flags(p: argparse.ArgumentParser) -> None:
    """Give ``p`` each retired flag whose replacements it has, as a ``RetiredFlag`` naming them."""
    for old, new in RETIRED_FLAGS.items():
        replaced_by = tuple(flag for flag in new if flag in p._option_string_actions)
        if replaced_by and old not in p._option_string_actions:
            p.add_argument(old, action=RetiredFlag, replaced_by=replaced_by, dest=argparse.SUPPRESS)
