"""``python -m loadtest.generate``: a scenario's events and ground truth to files, without a stream.

For labelled sets (the fraud model's training data) and offline experiments: the same generator Locust
uses, seeded, written as one JSON payload per line (exactly the bytes a producer would send) plus the
scenario's ground truth.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loadtest.errors import OptionError
from loadtest.generators import SCENARIOS, make_generator


@dataclass(frozen=True)
class Generated:
    """Where a run wrote its events and truth, and how many events."""

    events_path: Path
    truth_path: Path
    events: int


def generate(
    scenario: str,
    *,
    events: int,
    out_dir: Path,
    seed: int = 7,
    fraud_rate: float = 0.01,
    start: datetime | None = None,
) -> Generated:
    """Write ``events`` events of ``scenario`` to ``out_dir/<scenario>.jsonl`` and its truth beside it.

    Args:
        scenario: one of ``SCENARIOS``.
        events: how many events (at least 1).
        out_dir: directory to write into (created).
        seed: the generator's seed: the same seed, the same events.
        fraud_rate: share of transactions that start an injected fraud pattern (``transactions`` only).
        start: the wall clock of the first event (default: now); each next event is 1 ms later.
    """
    if events < 1:
        raise OptionError(f"--events: expected a whole number of at least 1, found {events}.")
    if not 0.0 <= fraud_rate <= 1.0:
        raise OptionError(f"--fraud-rate: expected a share between 0 and 1, found {fraud_rate}.")
    moment = [start or datetime.now(UTC)]

    def clock() -> datetime:
        # A fixed step instead of the wall clock: the output depends on the seed and `start` only.
        moment[0] += timedelta(milliseconds=1)
        return moment[0]

    generator = make_generator(scenario, seed=seed, clock=clock, fraud_rate=fraud_rate)
    out_dir.mkdir(parents=True, exist_ok=True)
    events_path = out_dir / f"{scenario}.jsonl"
    with events_path.open("wb") as handle:
        for _ in range(events):
            handle.write(generator.next_event().data + b"\n")
    truth = {**generator.ground_truth(), "seed": seed, "fraud_rate": fraud_rate}
    truth_path = out_dir / f"truth-{scenario}.json"
    truth_path.write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")
    return Generated(events_path, truth_path, events)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generate",
        description="Write a scenario's events (JSON lines) and ground truth to files, without a stream.",
    )
    parser.add_argument(
        "--scenario", choices=SCENARIOS, default="transactions", help="(default: %(default)s)"
    )
    parser.add_argument("--events", type=int, required=True, help="how many events to write")
    parser.add_argument(
        "--out", type=Path, required=True, help="directory for <scenario>.jsonl and the truth"
    )
    parser.add_argument("--seed", type=int, default=7, help="generator seed (default: %(default)s)")
    parser.add_argument(
        "--fraud-rate", type=float, default=0.01, help="transactions only (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        done = generate(
            args.scenario, events=args.events, out_dir=args.out, seed=args.seed, fraud_rate=args.fraud_rate
        )
    except OptionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {done.events:,} {args.scenario} events to {done.events_path} and the truth to {done.truth_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
