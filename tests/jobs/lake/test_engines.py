"""Engine lookup, JVM engine availability, file sizing, and racing table creation."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.lake import (
    Availability,
    DeltaRsEngine,
    EngineUnavailableError,
    JvmDeltaEngine,
    LakeEngine,
    LakeError,
    get_engine,
    with_retries,
)


def test_default_engine_is_delta_rs():
    engine = get_engine()
    assert isinstance(engine, DeltaRsEngine)
    assert isinstance(engine, LakeEngine)
    assert engine.name == "delta-rs"


def test_unknown_engine_name_lists_the_known_ones():
    with pytest.raises(
        LakeError, match=r"expected a lake engine name in \('delta-rs', 'jvm'\), found 'spark'"
    ):
        get_engine("spark")


def _class_not_found(name: str) -> None:
    raise LookupError(f"java.lang.ClassNotFoundException: {name}")


def test_jvm_engine_says_which_class_does_not_load_and_how_to_get_it(spark):
    status = JvmDeltaEngine(spark, load_class=_class_not_found).available()
    assert status.ok is False
    assert not status
    assert status.reason.startswith("JVM class io.delta.tables.DeltaTable does not load (LookupError)")
    assert "locally 'make jars' fetches the Delta jars" in status.reason


class _SessionWithoutDeltaExtension:
    """A session's conf as Spark started without Delta's extension (every local session has it now)."""

    class conf:  # SparkSession.conf, read as an attribute
        @staticmethod
        def get(key: str, default: str | None = None) -> str | None:
            return default


def test_jvm_engine_with_the_classes_but_not_the_extension_says_so():
    loaded: list[str] = []
    session = _SessionWithoutDeltaExtension()
    status = JvmDeltaEngine(session, load_class=loaded.append).available()  # type: ignore[arg-type]
    assert loaded == ["io.delta.tables.DeltaTable"]
    assert (status.ok, status.reason) == (
        False,
        "spark.sql.extensions lacks io.delta.sql.DeltaSparkSessionExtension; set it at startup",
    )


def test_asking_for_an_engine_that_cannot_run_is_an_error_naming_the_reason(monkeypatch):
    monkeypatch.setattr(JvmDeltaEngine, "available", lambda self: Availability(False, "no JVM here"))
    with pytest.raises(EngineUnavailableError, match="lake engine 'jvm' cannot run here: no JVM here"):
        get_engine("jvm")


def test_target_file_size_splits_files(tmp_path):
    engine = DeltaRsEngine()
    rows = pa.table(
        {"id": pa.array(range(200_000), pa.int64()), "payload": [f"p{i:08d}" for i in range(200_000)]}
    )
    engine.table(str(tmp_path / "big")).append(rows, app_id="a", batch_id=0)
    engine.table(str(tmp_path / "small")).append(rows, app_id="a", batch_id=0, target_file_size=256 * 1024)
    assert len(list(Path(tmp_path / "big").glob("*.parquet"))) == 1
    assert len(list(Path(tmp_path / "small").glob("*.parquet"))) > 1
    assert engine.table(str(tmp_path / "small")).read().num_rows == 200_000


def test_partitioning_of_an_existing_table_is_fixed(tmp_path):
    engine = DeltaRsEngine()
    uri = str(tmp_path / "t")
    engine.table(uri).append(
        pa.table({"id": [1], "day": ["d1"]}), app_id="a", batch_id=0, partition_by=["day"]
    )
    with pytest.raises(LakeError, match=r"expected partition columns \['id'\].*partitioned by \['day'\]"):
        engine.table(uri).append(
            pa.table({"id": [2], "day": ["d1"]}), app_id="a", batch_id=1, partition_by=["id"]
        )


def test_writers_racing_to_create_the_table_both_land(tmp_path):
    engine = DeltaRsEngine()
    uri = str(tmp_path / "t")
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(writer: int) -> None:
        start.wait()
        try:
            with_retries(
                lambda: engine.table(uri).append(pa.table({"id": [writer]}), app_id=f"w{writer}", batch_id=0),
                what=f"writer {writer}",
            )
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(engine.table(uri).read().column("id").to_pylist()) == [0, 1]
    assert engine.table(uri).version() == 1


def test_vacuum_full_removes_files_no_commit_referenced(tmp_path):
    engine = DeltaRsEngine()
    uri = tmp_path / "t"
    engine.table(str(uri)).append(pa.table({"id": [1]}), app_id="a", batch_id=0)
    orphan = uri / "part-00000-left-by-an-aborted-task.snappy.parquet"
    orphan.write_bytes(b"not referenced by any commit")
    assert engine.table(str(uri)).vacuum(retention_hours=0) == []
    assert orphan.exists()
    assert engine.table(str(uri)).vacuum(retention_hours=0, full=True) == [orphan.name]
    assert not orphan.exists()
    assert engine.table(str(uri)).read().column("id").to_pylist() == [1]


def test_merge_creates_a_partitioned_table_and_upserts_into_it(tmp_path):
    engine = DeltaRsEngine()
    uri = tmp_path / "orders"
    first = pa.table({"order_id": [1, 2], "order_date": ["2026-01-01", "2026-01-02"], "order_ts": [1, 1]})
    engine.table(str(uri)).merge(first, keys=["order_id"], precombine="order_ts", partition_by=["order_date"])
    engine.table(str(uri)).merge(
        pa.table({"order_id": [2], "order_date": ["2026-01-02"], "order_ts": [2]}),
        keys=["order_id"],
        precombine="order_ts",
    )
    assert sorted(p.name for p in uri.iterdir() if p.name.startswith("order_date=")) == [
        "order_date=2026-01-01",
        "order_date=2026-01-02",
    ]
    rows = sorted((r["order_id"], r["order_ts"]) for r in engine.table(str(uri)).read().to_pylist())
    assert rows == [(1, 1), (2, 2)]
