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


def _orders(argv: Sequence[str]) -> int:
    from jobs.pipelines import orders

    return orders.main(argv)


def _maintenance(argv: Sequence[str]) -> int:
    from jobs.pipelines import maintenance

    return maintenance.main(argv)


JOBS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "ingest": (_ingest, "Kinesis stream -> bronze Delta table, exactly once"),
    "sales": (_sales, "bronze -> silver sales, sales_quarantine, gold sales_by_product_minute"),
    "orders": (_orders, "order CDC -> copy-on-write or merge-on-read orders tables, exactly once"),
    "maintenance": (
        _maintenance,
        "compact / Z-order / vacuum / checkpoint Delta tables, once or on a schedule",
    ),
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
