"""The soak's sampler against folder trees and Delta tables with known contents."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from lakestack.soak_sampler import SoakSampler, _proc_tree_rss, folder_usage, spark_batches, status_line

MIB = 1024 * 1024


def _file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def _checkpoint(root: Path) -> Path:
    for batch in (7, 8, 9):
        _file(root / "offsets" / str(batch), 100)
        _file(root / "commits" / str(batch), 10)
    _file(root / "metadata", 50)
    _file(root / "pipeline" / "metrics" / "batch-0000000009.json", 40)
    return root


def test_folder_usage_counts_files_and_bytes_at_any_depth(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "ck")
    assert folder_usage(checkpoint) == (8, 3 * 100 + 3 * 10 + 50 + 40)
    assert folder_usage(tmp_path / "missing") == (0, 0)
    assert spark_batches(checkpoint) == 10
    assert spark_batches(tmp_path / "missing") == 0


def test_sample_reads_checkpoints_tables_state_and_rss(tmp_path: Path) -> None:
    ingest = _checkpoint(tmp_path / "checkpoints" / "ingest")
    fraud = tmp_path / "checkpoints" / "fraud"
    _file(fraud / "commits" / "0", 10)
    for part in range(2):
        _file(fraud / "state" / "0" / str(part) / "1.delta", 1000)
        _file(fraud / "state" / "0" / str(part) / "2.delta", 1000)
    table = tmp_path / "lake" / "sales"
    for value in (1, 2, 3):
        write_deltalake(str(table), pa.table({"v": [value]}), mode="append")
    log_bytes = sum(p.stat().st_size for p in (table / "_delta_log").iterdir())
    sampler = SoakSampler(
        checkpoints={"ingest": ingest, "fraud": fraud},
        tables=lambda: {"sales": (str(table), {}), "not_yet": (str(tmp_path / "lake" / "nothing"), {})},
        state_store=fraud / "state",
        rss=lambda: 1536 * MIB,
    )
    sample = sampler.sample(59.96)
    assert sample.t_s == 60.0
    assert dict(sample.values) == {
        "rss_mib": 1536.0,
        "checkpoint_files:ingest": 8,
        "checkpoint_mib:ingest": round(420 / MIB, 3),
        "batches:ingest": 10,
        "checkpoint_files:fraud": 5,
        "checkpoint_mib:fraud": round(4010 / MIB, 3),
        "batches:fraud": 1,
        "table_files:sales": 3,
        "delta_log_mib:sales": round(log_bytes / MIB, 3),
        "state_store_files": 4,
        "state_store_mib": round(4000 / MIB, 3),
    }
    assert status_line(sample, 2, 31) == (
        "soak sample 2/31 at 60s | RSS 1,536 MiB | checkpoints 13 files | tables 3 active files | "
        "state store 0.00 MiB"
    )


def test_proc_tree_rss_sums_a_process_and_its_descendants(tmp_path: Path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    # pid: (parent, resident pages); 40 is not in the tree, 13's command name holds ") (" and spaces.
    tree = {10: (1, 100), 11: (10, 20), 12: (11, 3), 13: (10, 5), 40: (1, 1000)}
    for pid, (ppid, pages) in tree.items():
        name = "java ) (x y" if pid == 13 else "python"
        _file(tmp_path / str(pid) / "stat", 0)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S {ppid} 1 1 0 -1\n")
        (tmp_path / str(pid) / "statm").write_text(f"9999 {pages} 0 0 0 0 0\n")
    (tmp_path / "self").mkdir()
    assert _proc_tree_rss(10, tmp_path) == (100 + 20 + 3 + 5) * page
    assert _proc_tree_rss(11, tmp_path) == 23 * page
