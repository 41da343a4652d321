"""The maintenance job: settings, schedule rules, each operation, its record, and running beside writers."""

from __future__ import annotations

import argparse
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from orders_scenarios import as_expected, at_t0, scenario

from jobs.__main__ import main as jobs_main
from jobs.errors import SettingsError
from jobs.lake import DeltaRsEngine, JvmDeltaEngine, RetryPolicy
from jobs.pipelines import maintenance
from jobs.pipelines._orders_tables import CowWriter, OrdersTables, read_snapshot
from jobs.pipelines.maintenance import MaintenanceRunner, MaintenanceSettings, Schedule

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def small_files(uri: str, batches: int, rows: int = 50, *, first: int = 0, engine=None) -> None:
    table = (engine or DeltaRsEngine()).table(uri)
    for batch in range(first, first + batches):
        ids = range(batch * rows, (batch + 1) * rows)
        table.append(
            pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"p{i:06d}" * 4 for i in ids]}),
            app_id="writer",
            batch_id=batch,
        )


def parse(argv: list[str]) -> MaintenanceSettings:
    parser = argparse.ArgumentParser()
    maintenance.add_arguments(parser)
    return maintenance.settings_from_args(parser.parse_args(argv))


# -- settings --------------------------------------------------------------------------------------------------


def test_defaults_compact_and_checkpoint_once():
    settings = parse(["--table", "/lake/orders"])
    assert settings.operations == ("compact", "checkpoint")
    assert (settings.every, settings.every_commits, settings.record_lake) == (None, None, "/lake")


def test_named_operations_replace_the_defaults():
    settings = parse(
        ["--table", "s3://b/orders", "--z-order", "order_id, customer_id", "--vacuum-retention", "90m"]
    )
    assert settings.operations == ("z-order", "vacuum")
    assert settings.z_order == ("order_id", "customer_id")
    assert settings.vacuum_retention == timedelta(minutes=90)
    assert settings.record_lake == "s3://b"
    assert parse(["--table", "t", "--target-file-size", "128MiB"]).target_file_size == 128 * 1024 * 1024


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--every", "10m", "--every-commits", "5"], "expected one schedule, found both"),
        (["--every", "ten minutes"], "--every: expected a duration like 30s, 10m, 168h or 7d"),
        (["--every-commits", "0"], "--every-commits: expected a whole number >= 1, found 0"),
        (["--vacuum-full", "--vacuum-retention", "30m"], "expected at least 1:00:00, because a full vacuum"),
        (["--vacuum-full"], "--vacuum-full: needs --vacuum-retention"),
        (["--target-file-size", "big"], "--target-file-size: expected a positive size like 134217728"),
        (["--max-runs", "0"], "--max-runs: expected a whole number >= 1, found 0"),
    ],
)
def test_bad_settings_are_named(argv, message):
    with pytest.raises(SettingsError, match=message):
        parse(["--table", "/lake/t", *argv])


def test_a_bad_flag_is_one_line_and_exit_2(capsys):
    assert jobs_main(["maintenance", "--table", "/lake/t", "--every", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --every: expected a duration like 30s")
    assert "Traceback" not in err


def test_a_missing_table_is_named(tmp_path, capsys):
    assert jobs_main(["maintenance", "--table", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == (
        f"error: --table: expected a Delta table at {tmp_path / 'nope'}, found none (no _delta_log). Check the URI, "
        "or run the job that writes that table first.\n"
    )


# -- schedule ---------------------------------------------------------------------------------------------------


def test_schedule_every_period():
    schedule = Schedule(MaintenanceSettings(tables=("a", "b"), every=timedelta(minutes=10)))
    assert schedule.due(T0, {"a": 1, "b": 1}) == ["a", "b"]
    schedule.done(T0, {"a": 2, "b": 2})
    assert schedule.due(T0 + timedelta(minutes=9), {"a": 9, "b": 9}) == []
    assert schedule.wait_s(T0 + timedelta(minutes=9), timedelta(seconds=10)) == 60.0
    assert schedule.due(T0 + timedelta(minutes=10), {"a": 9, "b": 9}) == ["a", "b"]


def test_schedule_every_n_commits_ignores_its_own_commits():
    schedule = Schedule(MaintenanceSettings(tables=("a", "b"), every_commits=5))
    assert schedule.due(T0, {"a": 3, "b": 7}) == ["a", "b"]  # at start
    schedule.done(T0, {"a": 5, "b": 9})  # versions after maintenance's own commits
    assert schedule.due(T0, {"a": 9, "b": 14}) == ["b"]
    schedule.done(T0, {"b": 16})
    assert schedule.due(T0, {"a": 10, "b": 20}) == ["a"]
    assert schedule.wait_s(T0, timedelta(seconds=10)) == 10.0


def test_schedule_once():
    schedule = Schedule(MaintenanceSettings(tables=("a",)))
    assert schedule.once
    assert schedule.due(T0, {"a": 0}) == ["a"]


# -- operations and the record ----------------------------------------------------------------------------------


def test_compaction_to_a_target_size_vacuum_and_checkpoint_are_recorded(tmp_path):
    uri = str(tmp_path / "lake" / "events")
    small_files(uri, 12)
    settings = MaintenanceSettings(
        tables=(uri,), target_file_size=4 * 1024, vacuum_retention=timedelta(0), checkpoint_log=True
    )
    runner = MaintenanceRunner(settings)
    assert runner.run(threading.Event()) == 0
    [done] = runner.records
    assert (done.operations, done.version_before, done.files_before, done.error) == (
        "compact,vacuum,checkpoint",
        11,
        12,
        None,
    )
    assert done.files_compacted == 12
    assert 1 < done.files_after < 12  # packed to about 4 KiB each, not one file
    assert done.files_written == done.files_after
    assert done.vacuumed_files == 12
    # OPTIMIZE is version 12; delta-rs logs a vacuum as two commits (VACUUM START, VACUUM END).
    assert done.checkpoint_version == done.version_after == 14
    assert len(list(Path(uri).glob("*.parquet"))) == done.files_after
    assert (Path(uri) / "_delta_log" / "00000000000000000014.checkpoint.parquet").exists()
    assert DeltaRsEngine().table(uri).read().num_rows == 600
    journal = DeltaRsEngine().table(str(tmp_path / "lake" / "_maintenance")).read().to_pylist()
    assert [(r["table_uri"], r["files_before"], r["files_after"], r["vacuumed_files"]) for r in journal] == [
        (uri, 12, done.files_after, 12)
    ]
    assert sorted(journal[0]["vacuumed"]) == sorted(done.vacuumed)


def test_z_order(tmp_path):
    uri = str(tmp_path / "events")
    small_files(uri, 4)
    runner = MaintenanceRunner(MaintenanceSettings(tables=(uri,), z_order=("id",), checkpoint_log=False))
    runner.run(threading.Event())
    assert [(r.operations, r.files_before, r.files_after) for r in runner.records] == [("z-order", 4, 1)]
    # delta-spark orders files along the Z-curve, not the rows inside one file: every row is still there once.
    assert sorted(DeltaRsEngine().table(uri).read().column("id").to_pylist()) == list(range(200))
    assert DeltaRsEngine().table(uri).commits()[-1].operation == "OPTIMIZE"


def test_every_n_commits_beside_a_running_appender(spark, tmp_path):
    # The appender is a Spark job's, as beside a real stream: one Delta writer kind per table.
    jvm = JvmDeltaEngine(spark)
    uri = str(tmp_path / "events")
    small_files(uri, 1, engine=jvm)
    stop, errors = threading.Event(), []

    def append_until_stopped() -> None:
        batch = 1
        try:
            while not stop.is_set() and batch < 200:
                small_files(uri, 1, rows=5, first=batch, engine=jvm)
                batch += 1
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    settings = MaintenanceSettings(
        tables=(uri,), every_commits=3, poll=timedelta(milliseconds=50), max_runs=4, checkpoint_log=True
    )
    runner = MaintenanceRunner(
        settings, retry=RetryPolicy(max_attempts=20, base_delay_s=0.01, max_delay_s=0.2)
    )
    writer = threading.Thread(target=append_until_stopped)
    writer.start()
    try:
        assert runner.run(threading.Event()) == 0
    finally:
        stop.set()
        writer.join(timeout=60)
    assert errors == []
    assert len(runner.records) == 4
    table = DeltaRsEngine().table(uri)
    appended = table.transaction_version("writer")
    assert appended is not None and appended > 4
    expected = list(range(50)) + [i for b in range(1, appended + 1) for i in range(b * 5, b * 5 + 5)]
    assert sorted(table.read().column("id").to_pylist()) == sorted(expected)


def test_compaction_beside_a_merging_stream_loses_nothing(tmp_path):
    tables = OrdersTables(str(tmp_path / "lake"))
    batches, expected = scenario(21, 500)
    writer = CowWriter(
        tables,
        app_id="q",
        clock=at_t0,
        retry=RetryPolicy(max_attempts=30, base_delay_s=0.01, max_delay_s=0.2),
    )
    stop, errors, first_run = threading.Event(), [], threading.Event()

    def stream() -> None:
        try:
            for batch_id, batch in enumerate(batches):
                if batch_id == len(batches) // 2:
                    # Half the batches, then the rest once a compaction has run: it rewrites under the MERGEs.
                    first_run.wait(timeout=120)
                writer.write(batch, batch_id)
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)
        finally:
            stop.set()

    thread = threading.Thread(target=stream)
    thread.start()
    runner = MaintenanceRunner(
        MaintenanceSettings(
            tables=(tables.orders.uri,),
            every_commits=2,
            poll=timedelta(milliseconds=20),
            checkpoint_log=False,
        ),
        retry=RetryPolicy(max_attempts=30, base_delay_s=0.01, max_delay_s=0.2),
    )

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not runner.records and not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        first_run.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    runner.run(stop)
    thread.join(timeout=120)
    first_run.set()
    watcher.join(timeout=1)
    assert errors == []
    assert [r.error for r in runner.records if r.error] == []
    assert len(runner.records) >= 2
    assert as_expected(read_snapshot(tables, "cow")) == expected


def test_the_command_runs_once_and_logs_what_it_did(tmp_path, caplog):
    uri = str(tmp_path / "events")
    small_files(uri, 3)
    with caplog.at_level("INFO", logger="jobs.pipelines.maintenance"):
        assert jobs_main(["maintenance", "--table", uri, "--vacuum-retention", "0h", "--compact"]) == 0
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("maintenance: ")]
    assert line.startswith(f"maintenance: {uri} [compact,vacuum] ok in ")
    assert "files 3 -> 1" in line
    assert "rewrote 3 into 1, vacuumed 3, version 2 -> 5" in line
