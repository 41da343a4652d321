"""`lakestack ingest`: the ingest job run here, the same as `python -m jobs ingest`."""

from __future__ import annotations

import argparse
import os

from lakestack.prerequisites import check_java


def _run(args: argparse.Namespace) -> int:
    check_java(os.environ)
    from jobs import ingest
    from jobs.entry import EntryOptions, apply_session_options, run_job

    def body() -> int:
        apply_session_options(EntryOptions(spark_master=args.spark_master, spark_conf=tuple(args.spark_conf)))
        return ingest.run(ingest.settings_from_args(args))

    # The job's own runner: one line per error with its exit status, Spark's output in the job log.
    return run_job(
        "ingest",
        body,
        prog="lakestack ingest",
        verbose=args.verbose,
        log_file=args.log_file,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ingest`` to the ``lakestack`` command line (the job's own flags)."""
    from jobs import ingest
    from jobs.entry import add_entry_arguments

    parser = subparsers.add_parser(
        "ingest",
        help="run the ingest job (Kinesis or Kafka/Event Hubs -> bronze Delta table) here; same as "
        "`python -m jobs ingest`",
        description="Read a Kinesis stream or a Kafka topic (an Event Hub) and append every record exactly once "
        "to a bronze Delta table.",
        epilog="""example (the emulator of `lakestack local up`, everything there is, then stop):
  lakestack ingest --stream lakestack-local-events --region us-east-1 --endpoint-url http://127.0.0.1:4566 \\
      --table s3://lakestack-local-lake/bronze/events --checkpoint /tmp/ingest-checkpoint --trigger available-now""",
    )
    ingest.add_arguments(parser)
    add_entry_arguments(parser)
    parser.set_defaults(handler=_run)
