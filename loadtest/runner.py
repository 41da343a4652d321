"""Command lines that run the Locust suite as subprocesses (headless, or a master and its workers)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.errors import OptionError
from loadtest.shapes import SHAPES

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
EVENTHUBS_LOCUSTFILE = Path(__file__).resolve().parent / "locustfile_eventhubs.py"
SHAPEFILE = Path(__file__).resolve().parent / "shapefile.py"


@dataclass(frozen=True)
class LocustRun:
    """A headless Locust run of the load suite; :meth:`argv` is its command line.

    Kinesis by default; with ``eventhubs_bootstrap`` the Event Hubs (Kafka) locustfile, with ``stream`` the
    hub's name (its connection string comes from ``LAKESTACK_EVENTHUBS_CONNECTION_STRING``, never argv).

    With ``max_events`` the users together send exactly that many events and the run then ends by
    itself; ``target_rate`` paces the total events/s. Exit status of the command: 0 when every event sent
    was acknowledged (throttled-then-acknowledged entries still show as failures in the statistics), 1
    when an event failed for good or the budget was not sent before ``run_time``, 2 for bad options or a
    missing stream.

    Raises:
        OptionError: a value is out of range (on construction).
    """

    stream: str
    region: str
    endpoint_url: str | None
    ledger_dir: str
    scenario: str = "sales"
    users: int = 2
    spawn_rate: float = 2
    run_time: str | None = None
    max_events: int | None = None
    target_rate: float | None = None
    batch_size: int = 100
    csv_prefix: str | None = None
    html: str | None = None
    extra: Sequence[str] = ()
    eventhubs_bootstrap: str | None = None
    # A load shape (loadtest.shapes) peaking at ``users``; it owns the run time (``shape_duration_s``).
    shape: str | None = None
    shape_duration_s: float | None = None

    def __post_init__(self) -> None:
        problems = [
            (self.users < 1, f"users: expected at least 1, found {self.users}."),
            (self.spawn_rate <= 0, f"spawn_rate: expected users/s > 0, found {self.spawn_rate}."),
            (
                not 1 <= self.batch_size <= 500,
                f"batch_size: expected 1 to 500 (the PutRecords limit), found {self.batch_size}.",
            ),
            (
                self.max_events is not None and self.max_events < 1,
                f"max_events: expected at least 1 (or None for no limit), found {self.max_events}.",
            ),
            (
                self.target_rate is not None and self.target_rate <= 0,
                f"target_rate: expected events/s > 0 (or None), found {self.target_rate}.",
            ),
            (
                self.shape is not None and self.shape not in SHAPES,
                f"shape: expected one of {', '.join(SHAPES)}, found {self.shape!r}.",
            ),
            (
                self.shape_duration_s is not None and self.shape_duration_s <= 0,
                f"shape_duration_s: expected seconds > 0 (or None), found {self.shape_duration_s}.",
            ),
        ]
        for failed, message in problems:
            if failed:
                raise OptionError(message)

    def argv(self) -> list[str]:
        """``sys.executable -m locust -f <locustfile> --headless ...`` for this run."""
        # The shape class lives in its own file so plain runs keep --users.
        locustfile = EVENTHUBS_LOCUSTFILE if self.eventhubs_bootstrap else LOCUSTFILE
        files = f"{locustfile},{SHAPEFILE}" if self.shape else str(locustfile)
        argv = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            files,
            "--headless",
            "--users",
            str(self.users),
            "--spawn-rate",
            f"{self.spawn_rate:g}",
            "--stream",
            self.stream,
            # An Event Hub has no AWS region: the flag is left out rather than given empty.
            *(["--region", self.region] if self.region else []),
            "--scenario",
            self.scenario,
            "--batch-size",
            str(self.batch_size),
            "--ledger",
            str(self.ledger_dir),
            # Let a user finish the batch in flight when it is stopped (run end, shape stepping down),
            # so an entry the stream accepted is never missing from the ledger.
            "--stop-timeout",
            "30",
        ]
        optional = [
            ("--endpoint-url", self.endpoint_url or None),
            ("--eventhubs-bootstrap", self.eventhubs_bootstrap or None),
            ("--run-time", self.run_time or None),
            ("--max-events", None if self.max_events is None else str(self.max_events)),
            ("--target-rate", None if self.target_rate is None else f"{self.target_rate:g}"),
            ("--csv", self.csv_prefix or None),
            ("--html", self.html or None),
            ("--shape", self.shape),
            ("--shape-users", str(self.users) if self.shape else None),
            ("--shape-duration", None if self.shape_duration_s is None else f"{self.shape_duration_s:g}"),
        ]
        for flag, value in optional:
            if value is not None:
                argv += [flag, value]
        return argv + list(self.extra)


def worker_command(
    *, master_port: int | None = None, extra: Sequence[str] = (), locustfile: Path = LOCUSTFILE
) -> list[str]:
    """argv for one Locust worker on this machine (options arrive from the master at spawn)."""
    argv = [sys.executable, "-m", "locust", "-f", str(locustfile), "--worker", "--master-host", "127.0.0.1"]
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
