"""``automem adopt``: take a DVC round's kept decision into the scaffolds and the lineage, or the
specialist registry, as the CLI's and Dagster's rounds do after their gate (``loop/adoption.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from automem_dagster.commands import shared
from automem_dagster.loop.adoption import adopt_decision


def register(sub) -> None:
    adopt = sub.add_parser("adopt", help="adopt a kept DVC decision: save the candidate as the next scaffold version "
                                         "and promote it in the lineage, or register the adapter as the specialist")
    adopt.add_argument("--decision", type=Path, required=True,
                       help="the decide stage's record: outputs/decide/structure.json or outputs/decide/proficiency.json "
                            "(the folders beside it, under outputs/, hold what it decided on)")
    adopt.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    Console().print(adopt_decision(args.decision, shared.STORAGE), soft_wrap=True)
    return 0
