"""The delta-rs engine's open table per URI: other writers seen, failures drop it, tables changed under it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import jobs.lake._deltars as deltars
from jobs.lake import DeltaRsEngine, LakeError, LakeTable
from jobs.lake._deltars import _commit_properties


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = deltars._open

    def counting(uri: str, options: dict[str, str]) -> DeltaTable | None:
        opened.append(uri)
        return real_open(uri, options)

    monkeypatch.setattr(deltars, "_open", counting)
    return opened


def _rows(uri: str) -> list[int]:
    return sorted(v for v in DeltaTable(uri).to_pyarrow_table().column("id").to_pylist() if v is not None)


def test_one_handle_is_kept_and_caught_up_rather_than_reopened(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    engine = DeltaRsEngine()
    table = engine.table(uri)
    table.append(pa.table({"id": [0]}), app_id="q", batch_id=0)  # creates the table
    opened = _count_opens(monkeypatch)
    results = [table.append(pa.table({"id": [b]}), app_id="q", batch_id=b) for b in (1, 2, 3)]
    assert [r.table_version for r in results] == [1, 2, 3]
    assert table.transaction_version("q") == 3
    assert opened == [uri]  # opened once after the create, then caught up
    assert _rows(uri) == [0, 1, 2, 3]


def test_a_commit_by_another_process_is_seen_by_the_kept_handle(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    table.append(pa.table({"id": [0]}), app_id="q", batch_id=0)
    table.append(pa.table({"id": [1]}), app_id="q", batch_id=1)  # the handle is now kept, at version 1
    # Another process commits batch 2 of the same query (e.g. a restarted job that got there first).
    code = (
        "import pyarrow as pa, sys; from deltalake import write_deltalake; "
        "from jobs.lake._deltars import _commit_properties; "
        "write_deltalake(sys.argv[1], pa.table({'id': [2]}), mode='append', "
        "commit_properties=_commit_properties('q', 2))"
    )
    subprocess.run([sys.executable, "-c", code, uri], check=True, timeout=120, cwd=Path(__file__).parents[3])
    assert table.transaction_version("q") == 2
    skipped = table.append(pa.table({"id": [2]}), app_id="q", batch_id=2)
    assert (skipped.committed, skipped.table_version, skipped.rows) == (False, 2, 0)
    landed = table.append(pa.table({"id": [3]}), app_id="q", batch_id=3)
    assert (landed.committed, landed.table_version) == (True, 3)
    assert _rows(uri) == [0, 1, 2, 3]


def _fail_one_append(table: LakeTable, monkeypatch: pytest.MonkeyPatch, *, batch_id: int) -> None:
    """Make the append of ``batch_id`` fail mid-commit (delta-rs raising), then put the real writer back."""

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("connection reset mid-commit")

    real_write = deltars.write_deltalake
    monkeypatch.setattr(deltars, "write_deltalake", broken)
    with pytest.raises(OSError, match="connection reset mid-commit"):
        table.append(pa.table({"id": [batch_id]}), app_id="q", batch_id=batch_id)
    monkeypatch.setattr(deltars, "write_deltalake", real_write)


def test_a_failed_write_drops_the_handle_and_the_next_append_opens_afresh(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    engine = DeltaRsEngine()
    table = engine.table(uri)
    table.append(pa.table({"id": [0]}), app_id="q", batch_id=0)
    table.append(pa.table({"id": [1]}), app_id="q", batch_id=1)
    assert len(engine._handles) == 1

    _fail_one_append(table, monkeypatch, batch_id=2)
    assert engine._handles == {}
    assert engine._transactions == {}  # what the dropped handle knew goes with it
    opened = _count_opens(monkeypatch)
    retried = table.append(pa.table({"id": [2]}), app_id="q", batch_id=2)
    assert (retried.committed, retried.table_version) == (True, 2)
    assert opened == [uri]
    assert _rows(uri) == [0, 1, 2]


def test_a_table_deleted_under_the_handle_is_an_error_not_a_new_table(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    for batch in range(3):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)
    shutil.rmtree(uri)
    with pytest.raises(
        LakeError,
        match=r"expected the Delta table at .*/t to still hold version 2, .*; found no table: the table was deleted",
    ):
        table.append(pa.table({"id": [3]}), app_id="q", batch_id=3)
    assert not Path(uri, "_delta_log").exists() or list(Path(uri, "_delta_log").glob("*.json")) == []


def test_a_table_recreated_shorter_under_the_handle_is_an_error(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    for batch in range(3):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)
    shutil.rmtree(uri)
    write_deltalake(uri, pa.table({"id": [100]}), mode="append")
    with pytest.raises(
        LakeError, match="hold version 2, the latest this writer read; found a table at version 0"
    ):
        table.append(pa.table({"id": [3]}), app_id="q", batch_id=3)
    assert _rows(uri) == [100]


def test_compaction_and_vacuum_under_the_handle_lose_nothing(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    for batch in range(4):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)
    other = DeltaTable(uri)
    other.optimize.compact()
    removed = other.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(removed) == 4
    landed = table.append(pa.table({"id": [4]}), app_id="q", batch_id=4)
    assert (landed.committed, landed.table_version) == (True, 7)  # 4: compact, 5-6: vacuum start and end
    assert _rows(uri) == [0, 1, 2, 3, 4]


def test_threads_appending_through_one_engine_take_turns(tmp_path):
    uri = str(tmp_path / "t")
    engine = DeltaRsEngine()
    engine.table(uri).append(pa.table({"id": [-1]}), app_id="setup", batch_id=0)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(writer: int) -> None:
        start.wait()
        try:
            for batch in range(3):
                engine.table(uri).append(
                    pa.table({"id": [writer * 10 + batch]}), app_id=f"w{writer}", batch_id=batch
                )
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert _rows(uri) == [-1, 0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]
    assert DeltaTable(uri).version() == 12
    assert [engine.table(uri).transaction_version(f"w{w}") for w in range(4)] == [2, 2, 2, 2]


def test_commit_properties_carry_the_batch(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [0]}), mode="append", commit_properties=_commit_properties("q", 7))
    assert DeltaTable(uri).transaction_version("q") == 7


def test_old_log_files_cleaned_up_under_the_handle_lose_nothing(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    for batch in range(3):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)  # kept at version 2
    other = DeltaTable(uri)
    write_deltalake(other, pa.table({"id": [3]}), mode="append", commit_properties=_commit_properties("q", 3))
    other.create_checkpoint()
    for version in range(3):  # what log retention removes once a checkpoint covers it
        Path(uri, "_delta_log", f"{version:020d}.json").unlink()
    opened = _count_opens(monkeypatch)
    landed = table.append(pa.table({"id": [4]}), app_id="q", batch_id=4)
    assert (landed.committed, landed.table_version) == (True, 4)
    assert opened == []  # the catch-up read only what came after the handle's version
    assert _rows(uri) == [0, 1, 2, 3, 4]


def _count_transaction_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``DeltaTable.transaction_version`` call (app id, the table's version): each replays the log."""
    asked: list[tuple[str, int]] = []
    real = DeltaTable.transaction_version

    def counting(self: DeltaTable, app_id: str) -> int | None:
        asked.append((app_id, self.version()))
        return real(self, app_id)

    monkeypatch.setattr(DeltaTable, "transaction_version", counting)
    return asked


def test_after_its_own_commits_the_engine_answers_transaction_lookups_without_reading_the_log(
    tmp_path, monkeypatch
):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    table.append(pa.table({"id": [0]}), app_id="q", batch_id=0)  # creates the table
    asked = _count_transaction_reads(monkeypatch)
    found = []
    for batch in (1, 2, 3):
        found.append(table.transaction_version("q"))  # the sink's lookup before each batch
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)
    found.append(table.transaction_version("q"))
    assert found == [0, 1, 2, 3]
    # Read once, at the handle's first version; every later answer is the batch the engine's own commit carried.
    assert asked == [("q", 0)]
    replayed = table.append(pa.table({"id": [3]}), app_id="q", batch_id=3)
    assert (replayed.committed, replayed.table_version, replayed.rows) == (False, 3, 0)
    assert asked == [("q", 0)]
    assert table.transaction_version("other") is None  # another app: not known, so read
    assert asked == [("q", 0), ("other", 3)]
    assert _rows(uri) == [0, 1, 2, 3]


def test_commits_by_another_writer_make_the_engine_read_transactions_again(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    table = DeltaRsEngine().table(uri)
    for batch in (0, 1):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)  # kept at version 1
    assert table.transaction_version("q") == 1
    asked = _count_transaction_reads(monkeypatch)
    # Another writer of the same query (a restarted job that got there first) records batch 5 ...
    write_deltalake(uri, pa.table({"id": [5]}), mode="append", commit_properties=_commit_properties("q", 5))
    assert table.transaction_version("q") == 5
    skipped = table.append(pa.table({"id": [5]}), app_id="q", batch_id=5)
    assert (skipped.committed, skipped.table_version) == (False, 2)
    # ... and one of another application commits without a transaction of this query.
    write_deltalake(uri, pa.table({"id": [7]}), mode="append", commit_properties=_commit_properties("r", 9))
    landed = table.append(pa.table({"id": [6]}), app_id="q", batch_id=6)
    assert (landed.committed, landed.table_version) == (True, 4)
    assert table.transaction_version("q") == 6
    assert table.transaction_version("r") == 9
    assert asked == [("q", 2), ("q", 3), ("r", 4)]
    assert _rows(uri) == [0, 1, 5, 6, 7]


def test_a_handle_opened_afresh_reads_transactions_afresh(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    engine = DeltaRsEngine()
    table = engine.table(uri)
    for batch in (0, 1):
        table.append(pa.table({"id": [batch]}), app_id="q", batch_id=batch)

    _fail_one_append(table, monkeypatch, batch_id=2)
    # What the dropped handle knew is not used for the one opened afresh, even at the same version.
    asked = _count_transaction_reads(monkeypatch)
    assert table.transaction_version("q") == 1
    assert asked == [("q", 1)]
