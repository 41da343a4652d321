"""``python -m jobs <job> [flags]``: the entry spark-submit runs on a cluster, and users run locally."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from jobs.errors import JobError


def _ingest(argv: Sequence[str]) -> int:
    from jobs import ingest

    return ingest.main(argv)


def _sales(argv: Sequence[str]) -> int:
    from jobs.pipelines import sales

    return sales.main(argv)


def _fraud(argv: Sequence[str]) -> int:
    from jobs.pipelines import fraud

    return fraud.main(argv)


def _train_fraud(argv: Sequence[str]) -> int:
    from jobs.pipelines import train_fraud

    return train_fraud.main(argv)


JOBS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "ingest": (_ingest, "Kinesis stream -> bronze Delta table, exactly once"),
    "sales": (_sales, "bronze -> silver sales, sales_quarantine, gold sales_by_product_minute"),
    "fraud": (_fraud, "bronze transactions -> scored silver, fraud alerts (stateful, per account)"),
    "train-fraud": (_train_fraud, "train the fraud model on a labelled set; write its artifact"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print("usage: python -m jobs <job> [--help] [flags]\n\njobs:")
        for name, (_, summary) in JOBS.items():
            print(f"  {name:<12} {summary}")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in JOBS:
        print(f"error: unknown job {name!r}; expected one of: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return JOBS[name][0](rest)
    except JobError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
