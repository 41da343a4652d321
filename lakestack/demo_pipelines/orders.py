"""The orders pipeline in the demo: copy-on-write and merge-on-read side by side on the same stream.

One query reads bronze and writes both layouts from each micro-batch (two writer threads; mor compacts
every 2 change commits beside the stream). After the drain, :func:`lakestack.orders_comparison.compare`
checks both against the orders scenario's expected state, reads ``orders`` as of the run's middle batch and
its change feed since, and measures each layout; the plot of latency and files over the run is written to
``<run>/orders.svg``. ``ok`` when both layouts match the expected state row for row, time travel and the
change feed agree with the truth, bronze rows = changes + quarantined + repeats dropped + other types, the
quarantine holds exactly the malformed records' bronze positions, and every other scenario's row was
counted as another type.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

from lakestack.demo_pipelines._base import Loads, RunContext

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from jobs.lake import LakeTable
    from jobs.pipelines.orders import OrdersJob, OrdersSettings
    from lakestack.orders_comparison import OrdersRecorder

PLOT = "orders.svg"
DEMO_COMPACT_EVERY = 2


class OrdersPipeline:
    """bronze -> ``orders`` (cow) and ``orders_base`` + ``orders_changes`` (mor), ``orders_quarantine``."""

    name: ClassVar[str] = "orders"
    scenarios: ClassVar[tuple[str, ...]] = ("orders",)

    def __init__(self) -> None:
        self._job: OrdersJob | None = None
        self._recorder: OrdersRecorder | None = None

    def settings(self, run: RunContext) -> OrdersSettings:
        from jobs.pipelines.orders import OrdersSettings

        return OrdersSettings(
            layout="cow",
            lake=run.lake,
            source_table=run.bronze,
            checkpoint=run.checkpoint(self.name),
            trigger=run.trigger,
            endpoint_url=run.endpoint_url,
            region=run.region,
            # A demo run is a few micro-batches long: compact every 2 change commits so it shows compaction.
            compact_every=DEMO_COMPACT_EVERY,
        )

    def start(self, run: RunContext) -> StreamingQuery:
        from jobs.pipelines.orders import OrdersJob
        from lakestack.orders_comparison import OrdersRecorder

        self._recorder = OrdersRecorder()
        self._job = OrdersJob(self.settings(run), layouts=("cow", "mor"), on_batch=self._recorder)
        return self._job.start(run.spark)

    def check(self, run: RunContext, loads: Loads) -> dict[str, Any]:
        from lakestack.errors import RunFailedError
        from lakestack.orders_comparison import compare

        if self._job is None or self._recorder is None:
            raise RunFailedError("the demo's steps ran out of order: the orders pipeline was never started.")
        self._job.close()  # a compaction still running finishes first
        load = loads["orders"]
        compaction = self._job.compaction
        figures, svg = compare(
            self._job.tables,
            self._recorder,
            load.truths,
            compactions=compaction.outcomes if compaction else (),
            acknowledged=len(load.entries),
        )
        (run.run_dir / PLOT).write_text(svg)
        quarantined = _quarantined(self._job.tables.quarantine)
        expected_quarantine = loads.expected_quarantine(self.name)
        figures["expected_quarantined"] = sum(expected_quarantine.values())
        figures["quarantine_matches_truth"] = quarantined == expected_quarantine
        figures["expected_other_types"] = loads.expected_other_types(self.name)
        ok = (
            figures.pop("ok")
            and figures["quarantine_matches_truth"]
            and figures["other_types"] == figures["expected_other_types"]
        )
        return {"ok": ok, **figures, "plot": PLOT}


def _quarantined(table: LakeTable) -> Counter[tuple[str, str]]:
    """Bronze positions in the quarantine table (none when it was never created: nothing was malformed)."""
    if not table.exists():
        return Counter()
    rows = table.read(columns=["shard_id", "sequence_number"])
    shards = [str(s) for s in rows["shard_id"].to_pylist()]
    sequences = [str(s) for s in rows["sequence_number"].to_pylist()]
    return Counter(zip(shards, sequences, strict=True))
