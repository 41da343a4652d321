"""``python -m jobs <job> [flags]``: the entry spark-submit runs on a cluster, and users run locally.

Every job registered in ``JOBS`` runs through :func:`jobs.entry.run_job`: its errors become one line and an
exit status (2: the user's to fix, 1: a failure), its full traces and Spark's own output go to the job log.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from jobs.entry import ENTRY_FLAGS_HELP, apply_session_options, run_job, split_entry_options
from jobs.errors import USER_MISTAKE, UsageError


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


def _orders(argv: Sequence[str]) -> int:
    from jobs.pipelines import orders

    return orders.main(argv)


def _maintenance(argv: Sequence[str]) -> int:
    from jobs.pipelines import maintenance

    return maintenance.main(argv)


JOBS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "ingest": (_ingest, "Kinesis stream -> bronze Delta table, exactly once"),
    "sales": (_sales, "bronze -> silver sales, sales_quarantine, gold sales_by_product_minute"),
    "fraud": (_fraud, "bronze transactions -> scored silver, fraud alerts (stateful, per account)"),
    "train-fraud": (_train_fraud, "train the fraud model on a labelled set; write its artifact"),
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
        print(f"\n{ENTRY_FLAGS_HELP}")
        return 0 if args else USER_MISTAKE
    name, rest = args[0], args[1:]
    if name not in JOBS:
        print(
            f"error: unknown job {name!r}; expected one of: {', '.join(JOBS)} (see `python -m jobs --help`)",
            file=sys.stderr,
        )
        return USER_MISTAKE
    try:
        options, job_args = split_entry_options(rest)
        apply_session_options(options)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return USER_MISTAKE
    job = JOBS[name][0]
    return run_job(name, lambda: job(job_args), verbose=options.verbose, log_file=options.log_file)


if __name__ == "__main__":
    sys.exit(main())
