"""`lakestack sweep [--yes]`: list the stacks past their expiry tag, and destroy them with --yes."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from lakestack import stacks
from lakestack.sweep import SweepItem, classify, destroy_expired


class _Pulumi:
    """The sweep's Automation API calls; pulumi's own output goes to stderr, keeping stdout for the table."""

    def list_stacks(self) -> list[stacks.StackStatus]:
        return stacks.list_stacks(command="sweep")

    def down(self, stack: str) -> None:
        stacks.down(stack, on_output=lambda line: print(line, end="", file=sys.stderr))

    def resources(self, stack: str) -> list[str]:
        return stacks.resources(stack, command="sweep")


def _row(item: SweepItem) -> dict[str, Any]:
    return {
        "stack": item.stack,
        "verdict": item.verdict,
        "expires_at": item.expires_at.isoformat() if item.expires_at else None,
        "resources": item.resources,
        "reason": item.reason,
    }


def run_sweep(args: argparse.Namespace, automation: Any = None) -> int:
    """Handler of ``lakestack sweep``; returns 1 when an expired stack could not be destroyed."""
    pulumi = automation or _Pulumi()
    items = classify(pulumi.list_stacks(), now=datetime.now(UTC))
    expired = [item for item in items if item.verdict == "expired"]
    for item in items:
        print(f"{item.stack:<24} {item.verdict:<10} {item.resources:>5} resources  {item.reason}")
    if not items:
        print("no stacks of this project in the Pulumi backend you are logged in to")
    results = []
    if expired and args.yes:
        results = destroy_expired(items, pulumi, say=lambda line: print(line, file=sys.stderr))
        for result in results:
            print(f"{result.stack}: {result.detail}")
    elif expired:
        print(f"{len(expired)} expired stack(s); run `lakestack sweep --yes` to destroy them")
    if args.json:
        print(
            json.dumps(
                {
                    "stacks": [_row(item) for item in items],
                    "destroyed": [r.stack for r in results if r.destroyed],
                    "failed": {r.stack: r.detail for r in results if not r.destroyed},
                }
            )
        )
    return 1 if any(not r.destroyed for r in results) else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``lakestack`` command line."""
    parser = subparsers.add_parser(
        "sweep",
        help="list stacks past their lakestack:expires-at; destroy them with --yes (needs the Pulumi CLI)",
        description=(
            "List this project's stacks in the Pulumi backend you are logged in to, each with its expiry (the "
            "expires_at output, which is the lakestack:expires-at tag on every resource): expired, active, "
            "empty (nothing deployed), busy (an update runs) or no-expiry (deployed before the tag existed). "
            "With --yes, destroy every expired stack through the Automation API and check that nothing is "
            "left. Exit 1 when an expired stack could not be destroyed."
        ),
        epilog="examples:\n  lakestack sweep\n  lakestack sweep --yes --json",
    )
    parser.add_argument("--yes", action="store_true", help="destroy the expired stacks (default: only list)")
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line, last")
    parser.set_defaults(handler=run_sweep)
