"""Compaction + Z-order of a many-small-files table, measured by what a one-key query reads."""

from __future__ import annotations

import pyarrow as pa

from jobs.lake import DeltaRsEngine
from jobs.pipelines._layout import busiest_key, measure, optimize


def _table_of_small_files(tmp_path, batches=6, per_account=1):
    table = DeltaRsEngine().table(str(tmp_path / "t"))
    for batch in range(batches):
        # Every batch holds every account: each file's min/max spans them all, as micro-batches do.
        accounts = [f"acct-{i:03d}" for i in range(50) for _ in range(per_account)] + ["acct-007"] * batch
        table.append(
            pa.table({"account_id": accounts, "amount": [float(i) for i in range(len(accounts))]}),
            app_id="t",
            batch_id=batch,
        )
    return table


def test_busiest_key_and_measure(tmp_path):
    table = _table_of_small_files(tmp_path)
    assert busiest_key(table.uri, None, column="account_id") == "acct-007"
    snapshot = measure(table.uri, None, column="account_id", key="acct-042", repeats=1)
    assert (snapshot.files, snapshot.files_read, snapshot.rows_found, snapshot.version) == (6, 6, 6, 5)
    assert snapshot.bytes > 0


def test_z_order_lets_a_one_account_query_skip_files(tmp_path):
    table = _table_of_small_files(tmp_path, per_account=400)  # 120k rows: the rewrite's batches are 8192 rows
    result = optimize(table, column="account_id", key="acct-042", target_file_size=1, repeats=1)
    assert result is not None
    assert (result.before.files, result.before.files_read) == (6, 6)
    assert result.files_removed == 6
    # A one-byte target: the rewrite closes a file after each batch it writes, each a narrow account range.
    assert result.after.files > 1
    assert result.after.files_read < result.after.files
    assert result.after.rows_found == result.before.rows_found == 6 * 400
    assert result.after.version == result.before.version + 1


def test_an_empty_table_has_nothing_to_optimize(tmp_path):
    table = DeltaRsEngine().table(str(tmp_path / "e"))
    table.create(pa.schema([pa.field("account_id", pa.string())]))
    assert optimize(table, column="account_id") is None
