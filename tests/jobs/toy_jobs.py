"""Toy jobs whose errors are raised where Spark wraps them, registered the way every job is: in JOBS.

Run as a script by tests/jobs/test_entry.py: ``python toy_jobs.py <emulator endpoint> <folder> <job>...``.
It runs each job through ``python -m jobs``'s own ``main`` in this one process (one Spark session for all),
prints their exit statuses as JSON on stdout and leaves stderr to what the entry prints.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import jobs.__main__ as entry
from jobs.errors import SettingsError
from jobs.lake.errors import LakeWriteError
from jobs.session import build_session


def foreach_batch_job(folder: Path) -> Callable[[Sequence[str]], int]:
    def job(argv: Sequence[str]) -> int:
        spark = build_session("toy")

        def write(_batch: object, batch_id: int) -> None:
            raise LakeWriteError(f"append of batch {batch_id} to /lake/t failed 5 times; retry the query.")

        rates = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
        query = rates.writeStream.foreachBatch(write).option("checkpointLocation", str(folder / "c1")).start()
        query.awaitTermination(300)
        return 0

    return job


def state_function_job(folder: Path) -> Callable[[Sequence[str]], int]:
    def job(argv: Sequence[str]) -> int:
        from pyspark.sql.streaming.state import GroupStateTimeout

        spark = build_session("toy")

        def detect(key: object, frames: object, state: object) -> object:
            raise SettingsError("--rule: expected a threshold above 0, found -1")
            yield  # a generator, as applyInPandasWithState wants

        rates = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
        keyed = rates.withColumn("account", rates.value % 2)
        alerts = keyed.groupBy("account").applyInPandasWithState(
            detect, "account long, n long", "n long", "append", GroupStateTimeout.NoTimeout
        )
        query = alerts.writeStream.format("noop").option("checkpointLocation", str(folder / "c2")).start()
        query.awaitTermination(300)
        return 0

    return job


def data_source_job(folder: Path, endpoint: str) -> Callable[[Sequence[str]], int]:
    def job(argv: Sequence[str]) -> int:
        from jobs import ingest

        settings = ingest.IngestSettings(
            stream="no-such-stream",
            region="us-east-1",
            endpoint_url=endpoint,
            table=str(folder / "table"),
            checkpoint=str(folder / "c3"),
        )
        # start() without run()'s preflight: the Kinesis source itself meets the missing stream, inside Spark.
        ingest.start(build_session("toy"), settings).awaitTermination(300)
        return 0

    return job


def main(argv: Sequence[str]) -> int:
    endpoint, folder, names = argv[0], Path(argv[1]), argv[2:]
    jobs = {
        "toy-sink": foreach_batch_job(folder),
        "toy-state": state_function_job(folder),
        "toy-source": data_source_job(folder, endpoint),
    }
    entry.JOBS.update({name: (job, "a toy job") for name, job in jobs.items()})
    codes = {name: entry.main([name, "--log-file", str(folder / f"{name}.log")]) for name in names}
    print(json.dumps(codes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
