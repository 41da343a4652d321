"""Command lines that run the Locust suite as subprocesses (headless, or a master and its workers)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from loadtest.errors import OptionError

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
SHAPEFILE = Path(__file__).resolve().parent / "shapefile.py"


def locust_command(
    *,
    stream: str,
    region: str,
    endpoint_url: str | None,
    ledger_dir: str,
    scenario: str = "sales",
    users: int = 2,
    spawn_rate: float = 2,
    run_time: str | None = None,
    max_events: int | None = None,
    target_rate: float | None = None,
    batch_size: int = 100,
    csv_prefix: str | None = None,
    html: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """argv for a headless Locust run of the Kinesis load suite (``sys.executable -m locust -f ...``).

    With ``max_events`` the users together send exactly that many events and the run then ends by
    itself; ``target_rate`` paces the total events/s. Exit status: 0 when every event sent was
    acknowledged (throttled-then-acknowledged entries still show as failures in the statistics),
    1 when an event failed for good or the budget was not sent before ``run_time``, 2 for bad options
    or a missing stream.

    Raises:
        OptionError: a value is out of range.
    """
    if users < 1:
        raise OptionError(f"users: expected at least 1, found {users}.")
    if spawn_rate <= 0:
        raise OptionError(f"spawn_rate: expected users/s > 0, found {spawn_rate}.")
    if not 1 <= batch_size <= 500:
        raise OptionError(f"batch_size: expected 1 to 500 (the PutRecords limit), found {batch_size}.")
    if max_events is not None and max_events < 1:
        raise OptionError(f"max_events: expected at least 1 (or None for no limit), found {max_events}.")
    if target_rate is not None and target_rate <= 0:
        raise OptionError(f"target_rate: expected events/s > 0 (or None), found {target_rate}.")
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--users",
        str(users),
        "--spawn-rate",
        f"{spawn_rate:g}",
        "--stream",
        stream,
        "--region",
        region,
        "--scenario",
        scenario,
        "--batch-size",
        str(batch_size),
        "--ledger",
        str(ledger_dir),
        # Let a user finish the batch in flight when it is stopped (run end, shape stepping down),
        # so an entry the stream accepted is never missing from the ledger.
        "--stop-timeout",
        "30",
    ]
    if endpoint_url:
        argv += ["--endpoint-url", endpoint_url]
    if run_time:
        argv += ["--run-time", run_time]
    if max_events is not None:
        argv += ["--max-events", str(max_events)]
    if target_rate is not None:
        argv += ["--target-rate", f"{target_rate:g}"]
    if csv_prefix:
        argv += ["--csv", csv_prefix]
    if html:
        argv += ["--html", html]
    return argv + list(extra)


def worker_command(*, master_port: int | None = None, extra: Sequence[str] = ()) -> list[str]:
    """argv for one Locust worker on this machine (options arrive from the master at spawn)."""
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker", "--master-host", "127.0.0.1"]
    if master_port is not None:
        argv += ["--master-port", str(master_port)]
    return argv + list(extra)


def distributed_extra(*, workers: int, master_port: int | None = None) -> list[str]:
    """Extra master flags for a distributed run with ``workers`` local workers."""
    if workers < 1:
        raise OptionError(f"workers: expected at least 1, found {workers}.")
    argv = ["--master", "--master-bind-host", "127.0.0.1", "--expect-workers", str(workers)]
    if master_port is not None:
        argv += ["--master-bind-port", str(master_port)]
    return argv
