"""A MERGE source keeps one row per key before either engine merges it: the highest precombine value, and on a tie
the last row in the batch (a later change to the same key at the same instant is the newer one)."""

from __future__ import annotations

import pyarrow as pa

from jobs.lake._arrow import latest_per_key, merge_source


def test_on_an_equal_precombine_value_the_last_row_of_the_batch_wins():
    batch = pa.table(
        {
            "id": [1, 2, 1, 1, 2, 3, 3, 3, 4, 4],
            "ts": [5, 7, 5, 5, 3, None, 1, None, None, None],
            "v": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"],
        }
    )
    # Winners in the order they stand in the batch.
    assert latest_per_key(batch, ["id"], "ts").to_pylist() == [
        {"id": 2, "ts": 7, "v": "b"},  # a higher value wins over a later row
        {"id": 1, "ts": 5, "v": "d"},  # three rows at 5: the last
        {"id": 3, "ts": 1, "v": "g"},  # a null loses to any value, wherever it stands
        {"id": 4, "ts": None, "v": "j"},  # all null: the last
    ]


def test_keys_of_several_columns_tie_the_same_way():
    batch = pa.table({"a": ["x", "x", "y", "x"], "b": [1, 2, 1, 1], "ts": [9, 9, 9, 9], "v": [1, 2, 3, 4]})
    assert latest_per_key(batch, ["a", "b"], "ts").column("v").to_pylist() == [2, 3, 4]


def test_a_delete_later_in_the_batch_at_the_same_instant_wins_and_a_null_flag_reads_as_no_delete():
    batch = pa.table(
        {
            "order_id": ["o1", "o2", "o1", "o2"],
            "order_ts": [10, 20, 10, 20],
            "status": ["paid", "new", None, "shipped"],
            "_delete": [False, True, True, None],
        }
    )
    source, columns = merge_source(batch, ["order_id"], "order_ts", "_delete")
    assert columns == ["order_id", "order_ts", "status"]
    assert source.to_pylist() == [
        {"order_id": "o1", "order_ts": 10, "status": None, "_delete": True},
        {"order_id": "o2", "order_ts": 20, "status": "shipped", "_delete": False},
    ]
