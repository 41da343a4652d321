"""Every job Synapse runs, through the launcher's entry (`python -m jobs <job> ...`) under this interpreter.

Run twice in `make test`: in the main environment (pyspark 4.1) and in .venv-spark35 (pyspark 3.5, Synapse's
Spark), so a job whose module or flags need a 4.0-only API fails on the Azure path. The maintenance job does no
Spark work (delta-rs in the driver) and runs here whole.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

ROOT = Path(__file__).resolve().parents[3]


def _jobs(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "jobs", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize(
    ("job", "flag"),
    [
        ("ingest", "--kafka-key-vault VAULT"),
        ("sales", "--delta-reader {auto,spark,python}"),
        ("fraud", "--delta-reader {auto,spark,python}"),
        ("orders", "--delta-reader {auto,spark,python}"),
        ("maintenance", "--every DURATION"),
    ],
)
def test_each_synapse_job_loads_and_takes_the_flags_the_stack_gives_it(job, flag, tmp_path):
    result = _jobs(job, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m jobs {job} ")
    assert flag in " ".join(result.stdout.split())


@pytest.mark.e2e
def test_maintenance_compacts_a_table_and_records_the_run(tmp_path):
    table = str(tmp_path / "lake" / "sales")
    for start in (0, 2, 4):
        write_deltalake(table, pa.table({"n": pa.array([start, start + 1], pa.int64())}), mode="append")
    lake = str(tmp_path / "lake")
    result = _jobs(
        "maintenance",
        "--table",
        table,
        "--lake",
        lake,
        "--compact",
        "--log-file",
        str(tmp_path / "job.log"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr + (tmp_path / "job.log").read_text()
    assert sorted(DeltaTable(table).to_pyarrow_table().column("n").to_pylist()) == [0, 1, 2, 3, 4, 5]
    assert len(DeltaTable(table).file_uris()) == 1
    (record,) = DeltaTable(f"{lake}/_maintenance").to_pyarrow_table().to_pylist()
    assert (
        record["table_uri"],
        record["version_before"],
        record["files_before"],
        record["files_compacted"],
        record["files_written"],
        record["files_after"],
        record["error"],
    ) == (table, 2, 3, 3, 1, 1, None)
