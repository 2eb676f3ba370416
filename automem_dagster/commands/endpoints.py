"""``automem endpoints check|schemas``: try an endpoints file before a round; print the JSON schemas sent."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from automem_dagster.commands.shared import GAME_HELP
from automem_dagster.endpoint_checks import request_schemas, run_checks
from automem_dagster.games import game_family
from automem_dagster.llm.config import load_endpoints
from automem_dagster.paths import DEFAULT_ENDPOINTS, RUNS
from automem_dagster.scaffold import load_scaffold


def register(sub) -> None:
    p = sub.add_parser("endpoints", help="check an endpoints file (one tiny request per role) or print the JSON "
                                         "schemas the project sends")
    actions = p.add_subparsers(dest="endpoints_command", required=True)
    check = actions.add_parser("check", help="validate the file, then send one tiny request per role in its mode")
    check.add_argument("--endpoints", type=Path, default=DEFAULT_ENDPOINTS, help="endpoints YAML (default: embedded model)")
    check.add_argument("--dry-run", action="store_true", help="only the file and the API key variables, no request")
    check.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    schemas = actions.add_parser("schemas", help="print every JSON schema sent for a game as one JSON object")
    schemas.add_argument("--game", required=True, help=GAME_HELP)
    schemas.add_argument("--scaffold", default="v0", help="scaffold version (default v0)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.endpoints_command == "schemas":
        version = args.scaffold.lstrip("v")
        scaffold = load_scaffold(game_family(args.game), version)
        json.dump(request_schemas(args.game, scaffold), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    config = load_endpoints(args.endpoints)
    results = run_checks(config, RUNS / "endpoint_checks", dry_run=args.dry_run)
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"endpoints {args.endpoints}" + (" (dry run: file and key variables only)" if args.dry_run else ""))
        for r in results:
            print(describe(r))
    return 0 if all(r["ok"] for r in results) else 1


def describe(r: dict) -> str:
    """One role's result as one line a person reads."""
    mode = r["mode"] + (" (derived from the server kind; set `constrained` to choose)" if r["mode_derived"] else "")
    head = f"{r['role']:<6} {'ok' if r['ok'] else 'UNUSABLE':<8} {r['model']} at {r['base_url']}, mode {mode}"
    facts = [f"vLLM {r['server_version']}"] if r["server_version"] else []
    if r["reachable"] is not None:
        facts.append("reachable" if r["reachable"] else "not reachable")
    if r["honoured"] is not None:
        facts.append("mode honoured" if r["honoured"] else "mode NOT honoured")
    if r["reply_schema"] is not None:
        facts.append("reply schema enforced by the server" if r["reply_schema"] == "enforced"
                     else "reply schema described in the prompt and validated (the server does not enforce it)")
    if r["latency_s"] is not None:
        facts.append(f"{r['latency_s']:.2f} s, {r['input_tokens']} input / {r['output_tokens']} output tokens")
    if r["reason"]:
        facts.append(r["reason"])
    return head + (": " + "; ".join(facts) if facts else "")
