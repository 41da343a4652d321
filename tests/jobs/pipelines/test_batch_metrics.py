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
    assert [m["batch_id"] for m in metrics.read_all()] == [4, 5, 6]


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
        metrics.write(batch_id, {"batch_id": batch_id, "rows": 10, "try": "first"})
    metrics.write(2, {"batch_id": 2, "rows": 10, "try": "replay"})
    assert metrics.read_all() == [
        {"batch_id": 1, "rows": 10, "try": "first", "totals": {"rows": 20}},
        {"batch_id": 2, "rows": 10, "try": "replay", "totals": {"rows": 30}},
    ]


@pytest.mark.parametrize("retain", [1, 2, 5])
def test_totals_count_every_batch_also_the_pruned_and_across_restarts(tmp_path, retain):
    metrics = BatchMetrics(str(tmp_path), retain=retain)
    for batch_id in range(6):
        metrics.write(batch_id, {"batch_id": batch_id, "rows": batch_id + 1, "late": 1, "watermark": "t"})
    # A restart replays batch 5 (crash before Spark's commit), then goes on with a new writer.
    restarted = BatchMetrics(str(tmp_path), retain=retain)
    restarted.write(5, {"batch_id": 5, "rows": 6, "late": 1, "watermark": "t"})
    restarted.write(6, {"batch_id": 6, "rows": 7, "late": 0, "watermark": "t"})
    assert len(restarted.batch_ids()) == min(retain, 7)
    assert BatchMetrics(str(tmp_path)).totals() == {"late": 6, "rows": 28}
    assert BatchMetrics(str(tmp_path / "new")).totals() == {}


def test_retention_below_one_batch_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="expected batches to retain >= 1, found 0"):
        BatchMetrics(str(tmp_path), retain=0)
