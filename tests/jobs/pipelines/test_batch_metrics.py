"""The pipelines' per-batch figures next to the checkpoint are retained like Spark's own logs (issue 18)."""

from __future__ import annotations

import pytest

from jobs.errors import SettingsError
from jobs.pipelines._job import METRICS_DIR, BatchMetrics


def _names(checkpoint) -> list[str]:
    return sorted(p.name for p in (checkpoint / METRICS_DIR).iterdir())


def test_only_the_newest_batches_are_kept(tmp_path):
    metrics = BatchMetrics(str(tmp_path), retain=3)
    for batch_id in range(7):
        metrics.write(batch_id, {"batch_id": batch_id})
    assert _names(tmp_path) == ["batch-0000000004.json", "batch-0000000005.json", "batch-0000000006.json"]
    assert metrics.read_all() == [{"batch_id": 4}, {"batch_id": 5}, {"batch_id": 6}]


def test_a_restarted_writer_prunes_what_an_earlier_one_left(tmp_path):
    BatchMetrics(str(tmp_path), retain=10).write(0, {"batch_id": 0})
    for batch_id in range(1, 6):
        BatchMetrics(str(tmp_path), retain=10).write(batch_id, {"batch_id": batch_id})
    # A restart with a smaller retention lists the folder once and removes what is now too old.
    restarted = BatchMetrics(str(tmp_path), retain=2)
    restarted.write(6, {"batch_id": 6})
    assert restarted.batch_ids() == [5, 6]


def test_a_replayed_batch_overwrites_its_file_and_removes_nothing_more(tmp_path):
    metrics = BatchMetrics(str(tmp_path), retain=2)
    for batch_id in (0, 1, 2):
        metrics.write(batch_id, {"batch_id": batch_id, "try": 1})
    metrics.write(2, {"batch_id": 2, "try": 2})
    assert metrics.read_all() == [{"batch_id": 1, "try": 1}, {"batch_id": 2, "try": 2}]


def test_retention_below_one_batch_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="expected batches to retain >= 1, found 0"):
        BatchMetrics(str(tmp_path), retain=0)
